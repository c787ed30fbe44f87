package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// bin is the latchctl binary the tests run, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "latchctl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "latchctl")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build latchctl: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir) // a temp dir: nothing to report
	os.Exit(code)
}

// latchctl is one run of the binary.
type latchctl struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

func start(t *testing.T, env []string, args ...string) *latchctl {
	t.Helper()
	l := &latchctl{cmd: exec.Command(bin, args...)}
	l.cmd.Env = append(os.Environ(), env...)
	l.cmd.Stdout, l.cmd.Stderr = &l.stdout, &l.stderr
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l.cmd.ProcessState == nil {
			_ = l.cmd.Process.Kill() // a test that failed early
			_ = l.cmd.Wait()
		}
	})
	return l
}

// wait waits for the run to end, at most limit, and returns its status.
func (l *latchctl) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = l.cmd.Wait(); close(done) }() // the status is in ProcessState
	select {
	case <-done:
	case <-time.After(limit):
		_ = l.cmd.Process.Kill()
		<-done
		t.Fatalf("latchctl %q still running after %v; stderr: %s", l.cmd.Args[1:], limit, l.stderr.String())
	}
	return l.cmd.ProcessState.ExitCode()
}

func runCtl(t *testing.T, env []string, limit time.Duration, args ...string) (int, string, string) {
	t.Helper()
	l := start(t, env, args...)
	code := l.wait(t, limit)
	return code, l.stdout.String(), l.stderr.String()
}

func waitFile(t *testing.T, path string, limit time.Duration) string {
	t.Helper()
	var b []byte
	testutil.Eventually(t, limit, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil && len(b) > 0 && b[len(b)-1] == '\n'
	}, "file "+path+" never written")
	return strings.TrimSpace(string(b))
}

func holders(s *servertest.Server, key string) int {
	st := s.Engine.Snapshot(0)
	for _, l := range st.Locks {
		if l.Key == key {
			return 1
		}
	}
	for _, x := range st.Semaphores {
		if x.Key == key {
			return x.Holders
		}
	}
	return 0
}

// Two latchctl lock runs on one key never run their commands at the same
// time, and each later holder sees a larger fence.
func TestLockExcludesAndFenceRises(t *testing.T) {
	t.Parallel()
	s := servertest.StartServer(t)
	dir := t.TempDir()
	const n = 3
	script := `date +%s%N > "$0.start"; sleep 0.3; date +%s%N > "$0.end"; ` +
		`printf '%s %s %s\n' "$LATCHD_KEY" "$LATCHD_FENCE" "$LATCHD_TOKEN" > "$0.env"`
	runs := make([]*latchctl, n)
	for i := range runs {
		runs[i] = start(t, nil, "--addr", s.Addr, "lock", "job", "--timeout", "20", "--",
			"sh", "-c", script, filepath.Join(dir, strconv.Itoa(i)))
	}
	type span struct {
		start, end int64
		fence      string
	}
	spans := make([]span, n)
	for i, r := range runs {
		if code := r.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("run %d exited %d: %s", i, code, r.stderr.String())
		}
		read := func(ext string) string {
			b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)+ext))
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(string(b))
		}
		st, _ := strconv.ParseInt(read(".start"), 10, 64)
		en, _ := strconv.ParseInt(read(".end"), 10, 64)
		env := strings.Fields(read(".env"))
		if len(env) != 3 || env[0] != "job" || len(env[1]) != 16 || len(env[2]) != 32 || !strings.HasPrefix(env[2], env[1]) {
			t.Fatalf("run %d environment %q: want KEY, 16-hex FENCE, 32-hex TOKEN starting with it", i, env)
		}
		spans[i] = span{st, en, env[1]}
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.start - b.start) })
	for i := 1; i < n; i++ {
		if spans[i].start < spans[i-1].end {
			t.Errorf("runs overlap: one ran %d..%d, the next started at %d", spans[i-1].start, spans[i-1].end, spans[i].start)
		}
		if spans[i].fence <= spans[i-1].fence { // same-length hex: string order is numeric order
			t.Errorf("fence did not rise: %s then %s", spans[i-1].fence, spans[i].fence)
		}
	}
	if h := holders(s, "job"); h != 0 {
		t.Errorf("key still held by %d after every run exited", h)
	}
}

func TestExitStatuses(t *testing.T) {
	t.Parallel()
	s := servertest.StartServer(t)
	ctx := context.Background()
	conn, err := client.Dial(ctx, s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Acquire(ctx, "busy", 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		want       int
		wantStderr string
	}{
		{name: "command's status", args: []string{"lock", "free", "--", "sh", "-c", "exit 7"}, want: 7},
		{name: "acquire timeout", args: []string{"lock", "busy", "--timeout", "1", "--", "true"}, want: exitTimeout, wantStderr: "timed out"},
		{name: "try once", args: []string{"lock", "busy", "--timeout", "0", "--", "true"}, want: exitTimeout},
		{name: "command not found", args: []string{"lock", "free", "--", "/nonexistent/cmd"}, want: exitNotFound},
		{name: "killed by a signal", args: []string{"lock", "free", "--", "sh", "-c", "kill -9 $$"}, want: 128 + 9},
		{name: "no command", args: []string{"lock", "free"}, want: exitUsage, wantStderr: "needs a command"},
		{name: "sem without limit", args: []string{"sem", "s", "--", "true"}, want: exitUsage, wantStderr: "--limit"},
		{name: "unknown flag", args: []string{"lock", "k", "--nope", "--", "true"}, want: exitUsage},
		{name: "server down", args: []string{"--addr", "127.0.0.1:1", "lock", "k", "--", "true"}, want: exitError, wantStderr: "acquire k"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--addr", s.Addr}, tt.args...)
			code, _, stderr := runCtl(t, nil, 10*time.Second, args...)
			if code != tt.want || !strings.Contains(stderr, tt.wantStderr) {
				t.Fatalf("exit %d, stderr %q; want %d with %q", code, stderr, tt.want, tt.wantStderr)
			}
		})
	}
}

// A holder killed with SIGKILL releases the key (its connection closes),
// and its command is killed with it.
func TestKilledHolderReleases(t *testing.T) {
	t.Parallel()
	s := servertest.StartServer(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	holder := start(t, nil, "--addr", s.Addr, "lock", "k", "--", "sh", "-c", `echo $$ > "$0"; exec sleep 30`, pidFile)
	pid, _ := strconv.Atoi(waitFile(t, pidFile, 10*time.Second))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test fails
	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = holder.wait(t, 5*time.Second)
	// The second holder's wait (5 s) ends long before the killed
	// holder's lease (the server's default, 33 s) would.
	code, _, stderr := runCtl(t, nil, 10*time.Second, "--addr", s.Addr, "lock", "k", "--timeout", "5", "--", "true")
	if code != 0 {
		t.Fatalf("second holder exited %d: the killed holder's lease was not released with its connection: %s", code, stderr)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return syscall.Kill(pid, 0) != nil },
		"the killed holder's command is still running")
}

// stallProxy forwards TCP to a server until stalled; then it forwards
// nothing more in either direction but keeps the connections open, as a
// network partition would.
type stallProxy struct {
	ln      net.Listener
	mu      sync.Mutex
	stalled chan struct{}
	conns   []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, stalled: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go p.pipe(c, up)
			go p.pipe(up, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *stallProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 4096)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.stalled:
			<-make(chan struct{}) // hold the bytes until the test ends (Cleanup closes src)
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall() { close(p.stalled) }

// A lease lost while CMD runs (renewals stall, the server expires the
// lease and grants the key to another) stops CMD: SIGTERM first, SIGKILL
// after --kill-after if it ignores that; latchctl exits 76.
func TestLostLeaseStopsCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		trap     string // what CMD does on SIGTERM
		wantNote string // written by CMD's trap
	}{
		{name: "stops on SIGTERM", trap: `trap 'echo TERM > "$0.term"; exit 0' TERM`, wantNote: "TERM"},
		{name: "ignores SIGTERM, gets SIGKILL", trap: `trap '' TERM`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := servertest.StartServer(t)
			p := newStallProxy(t, s.Addr)
			base := filepath.Join(t.TempDir(), "cmd")
			script := tt.trap + `; echo ready > "$0.ready"; while :; do sleep 0.05; done`
			holder := start(t, nil, "--addr", p.ln.Addr().String(), "lock", "k", "--ttl", "2", "--kill-after", "1",
				"--", "sh", "-c", script, base)
			waitFile(t, base+".ready", 10*time.Second)
			p.stall()
			// The server expires the lease on its own and grants the key to
			// another client, while the stalled holder still runs.
			conn, err := client.Dial(context.Background(), s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Acquire(context.Background(), "k", 10*time.Second, time.Minute); err != nil {
				t.Fatalf("the stalled lease was not expired by the server: %v", err)
			}
			code := holder.wait(t, 10*time.Second)
			if code != exitLost || !strings.Contains(holder.stderr.String(), "lost the lease on k") {
				t.Fatalf("exit %d, stderr %q; want %d and a message", code, holder.stderr.String(), exitLost)
			}
			if tt.wantNote != "" {
				if got := waitFile(t, base+".term", time.Second); got != tt.wantNote {
					t.Fatalf("CMD noted %q, want %q", got, tt.wantNote)
				}
			}
		})
	}
}

// Signals to latchctl reach CMD; CMD's status is latchctl's; the key is
// released.
func TestSignalsForwarded(t *testing.T) {
	t.Parallel()
	s := servertest.StartServer(t)
	base := filepath.Join(t.TempDir(), "cmd")
	script := `trap 'echo HUP >> "$0.sig"' HUP; trap 'exit 3' TERM; echo ready > "$0.ready"; while :; do sleep 0.05; done`
	holder := start(t, nil, "--addr", s.Addr, "lock", "k", "--", "sh", "-c", script, base)
	waitFile(t, base+".ready", 10*time.Second)
	if err := holder.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := waitFile(t, base+".sig", 5*time.Second); got != "HUP" {
		t.Fatalf("CMD got %q, want HUP", got)
	}
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t, 5*time.Second); code != 3 {
		t.Fatalf("exit %d, want CMD's 3; stderr %s", code, holder.stderr.String())
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return holders(s, "k") == 0 }, "key still held")
}

func TestSemAndElect(t *testing.T) {
	t.Parallel()
	s := servertest.StartServer(t)
	ctx := context.Background()
	conn, err := client.Dial(ctx, s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.SemAcquire(ctx, "pool", 2, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCtl(t, nil, 10*time.Second, "--addr", s.Addr, "sem", "pool", "--limit", "2", "--timeout", "5",
		"--", "sh", "-c", `test "$LATCHD_KEY" = pool`); code != 0 {
		t.Fatalf("sem with a free slot exited %d: %s", code, stderr)
	}
	if _, err := conn.SemAcquire(ctx, "pool", 2, 0, time.Minute); err != nil { // both slots taken now
		t.Fatal(err)
	}
	if code, _, _ := runCtl(t, nil, 10*time.Second, "--addr", s.Addr, "sem", "pool", "--limit", "2", "--timeout", "1", "--", "true"); code != exitTimeout {
		t.Fatalf("sem on a full semaphore exited %d, want %d", code, exitTimeout)
	}
	code, out, stderr := runCtl(t, nil, 10*time.Second, "--addr", s.Addr, "elect", "leader", "--", "sh", "-c", `echo "$LATCHD_KEY $LATCHD_FENCE"`)
	if f := strings.Fields(out); code != 0 || len(f) != 2 || f[0] != "leader" || len(f[1]) != 16 {
		t.Fatalf("elect exited %d, printed %q: %s", code, out, stderr)
	}
}

func TestStatsAndHealth(t *testing.T) {
	t.Parallel()
	var eng *engine.Engine // set below, before anything scrapes
	reg := metrics.NewRegistryFunc(func() *engine.Engine { return eng })
	s := servertest.StartServerWith(t, []server.Option{server.WithMetrics(reg.TCP())})
	eng = s.Engine
	stopMetrics, metricsAddr, err := metrics.Serve("127.0.0.1:0", reg, zap.NewNop(), metrics.ServeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopMetrics(context.Background()) }) // the test is over
	ctx := context.Background()
	conn, err := client.Dial(ctx, s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Acquire(ctx, "held-key", 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCtl(t, nil, 10*time.Second, "--addr", s.Addr, "stats")
	if code != 0 || !strings.Contains(out, "LEASE LEFT") || !regexpLine(out, "held-key", "lock", "1", "0", "1") {
		t.Fatalf("stats exited %d: %q %s", code, out, stderr)
	}
	code, out, _ = runCtl(t, nil, 10*time.Second, "--addr", s.Addr, "stats", "--json")
	var st client.Stats
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Locks) != 1 || st.Locks[0].Key != "held-key" {
		t.Fatalf("stats --json exited %d: %q (%v)", code, out, err)
	}
	code, out, _ = runCtl(t, nil, 10*time.Second, "--addr", s.Addr, "top", "--once")
	if code != 0 || !strings.Contains(out, "held-key") || !strings.Contains(out, "connections") {
		t.Fatalf("top --once exited %d: %q", code, out)
	}
	if code, out, stderr := runCtl(t, nil, 10*time.Second, "--addr", s.Addr, "top", "--once", "--interval", "0.2",
		"--metrics-url", "http://"+metricsAddr+"/metrics"); code != 0 || !strings.Contains(out, "ops/s: grants ") {
		t.Fatalf("top --once --metrics-url exited %d: %q %s", code, out, stderr)
	}
	if code, out, _ := runCtl(t, nil, 10*time.Second, "--addr", s.Addr, "health"); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("health exited %d: %q", code, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nobody listens there now
	if code, out, _ := runCtl(t, nil, 10*time.Second, "--addr", dead, "health"); code != exitError || !strings.Contains(out, "unhealthy") {
		t.Fatalf("health of a dead address exited %d: %q", code, out)
	}
}

// regexpLine reports whether some line of out has exactly these fields.
func regexpLine(out string, fields ...string) bool {
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) >= len(fields) && slices.Equal(f[:len(fields)], fields) {
			return true
		}
	}
	return false
}

// latchctl speaks TLS and sends LATCHD_AUTH_TOKEN.
func TestTLSAndAuth(t *testing.T) {
	t.Parallel()
	cert, caFile := selfSigned(t)
	s := servertest.StartServer(t, func(_ *engine.Config, sc *server.Config) {
		sc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		sc.AuthToken = "s3cret"
	})
	env := []string{"LATCHD_AUTH_TOKEN=s3cret"}
	if code, out, stderr := runCtl(t, env, 10*time.Second, "--addr", s.Addr, "--tls-ca", caFile, "health"); code != 0 {
		t.Fatalf("health over TLS exited %d: %s %s", code, out, stderr)
	}
	if code, _, stderr := runCtl(t, env, 10*time.Second, "--addr", s.Addr, "--tls-ca", caFile, "lock", "k", "--", "true"); code != 0 {
		t.Fatalf("lock over TLS exited %d: %s", code, stderr)
	}
	if code, _, stderr := runCtl(t, []string{"LATCHD_AUTH_TOKEN=wrong"}, 10*time.Second, "--addr", s.Addr, "--tls-ca", caFile, "lock", "k", "--", "true"); code != exitError || !strings.Contains(stderr, "auth") {
		t.Fatalf("a wrong token exited %d: %s", code, stderr)
	}
	if code, _, _ := runCtl(t, env, 10*time.Second, "--addr", s.Addr, "lock", "k", "--timeout", "1", "--", "true"); code == 0 {
		t.Fatal("plain TCP to a TLS server succeeded")
	}
}

// With --servers, latchctl finds the cluster's leader from any seed.
func TestClusterFollowsLeader(t *testing.T) {
	t.Parallel()
	c := servertest.StartCluster(t, 3, nil)
	leader := c.Leader(10 * time.Second)
	var seeds []string
	for i, m := range c.Members() {
		if i != leader {
			seeds = append([]string{m.Addr}, seeds...) // followers first
		} else {
			seeds = append(seeds, m.Addr)
		}
	}
	code, _, stderr := runCtl(t, nil, 20*time.Second, "--servers", strings.Join(seeds, ","), "lock", "k", "--timeout", "5",
		"--", "sh", "-c", `test -n "$LATCHD_TOKEN"`)
	if code != 0 {
		t.Fatalf("lock on a cluster exited %d: %s", code, stderr)
	}
}

// selfSigned makes a certificate for 127.0.0.1 and writes it as a CA file.
func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "latchctl test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, caFile
}

// TestHelpWritesDoubleDash: latchctl's help and each subcommand's write
// every flag --flag, as the docs do.
func TestHelpWritesDoubleDash(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"lock", "-h"}, {"sem", "--help"}, {"top", "-h"}} {
		var out, errb bytes.Buffer
		if code := run(args, func(string) string { return "" }, &out, &errb); code != 0 {
			t.Fatalf("latchctl %v: exit %d, want 0", args, code)
		}
		help := errb.String()
		if !strings.Contains(help, "\n  --addr string") {
			t.Errorf("latchctl %v: no --addr line in:\n%s", args, help)
		}
		if m := regexp.MustCompile(`(?m)^\s+-[a-z]`).FindString(help); m != "" {
			t.Errorf("latchctl %v: a flag written with one dash: %q", args, m)
		}
	}
}
