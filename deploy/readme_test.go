package deploy

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testport"
)

// The README's commands, run as a reader would on this machine: each
// command of its sh blocks is run here, or skipped for a reason written
// below. A command no rule knows fails the test, so a new one has to be
// run or its skip explained.

// readmeBlock is one fenced code block of the README.
type readmeBlock struct {
	lang  string
	lines []string // continuation lines joined
}

func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	var cur *readmeBlock
	cont := ""
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &readmeBlock{lang: strings.TrimPrefix(line, "```")}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			if l, ok := strings.CutSuffix(line, "\\"); ok {
				cont += l
				continue
			}
			cur.lines = append(cur.lines, cont+line)
			cont = ""
		}
	}
	return blocks
}

// command is a shell line without its comment.
func command(line string) string {
	if strings.HasPrefix(strings.TrimSpace(line), "#") {
		return ""
	}
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}

// skipped are the README commands not run here, and why.
var skipped = []struct{ prefix, why string }{
	{"go install github.com/latchd/latchd/cmd/...@latest", "fetches the published module over the network; `make build` below builds the same commands from this tree"},
	{"make dist", "cross-compiles nine binaries: minutes; `make build` below runs the same go build per command"},
	{"docker ", "no docker here; TestDockerBuildStage runs the Dockerfile's build stage by hand"},
	{"sudo systemctl", "changes the machine's services; TestSystemdUnit checks the unit with systemd-analyze verify"},
	{"make run", "serves on the fixed ports 6388 and 6389 until stopped; the same bin/latchd runs on free ports here"},
	{"make test", "the suite this test is part of"},
	{"make bench", "minutes of load; bin/latchd-bench runs here with a short sweep"},
	{"make soak", "the long reliability suite (30 minutes)"},
}

// TestReadmeCommands runs the README's commands in a copy of the tree:
// make build, latchd --version, the hand-typed exchange, the three-node
// cluster on free ports (started, asked for its leader, an election held
// on it, stopped, then started again from its logs), latchctl against a
// live server, latchd-bench and the zombie example.
func TestReadmeCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binaries and starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	work := copyTree(t)
	r := &readmeRun{t: t, ctx: ctx, work: work}
	r.sh("make build")
	live := r.startLatchd()
	for _, s := range []string{"backup.sh", "render.sh", "scheduler"} { // the commands latchctl runs
		if err := os.WriteFile(filepath.Join(work, s), []byte("#!/bin/sh\necho \"$0: $LATCHD_KEY fence $LATCHD_FENCE\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var elect string
	for _, b := range readmeBlocks(t) {
		for _, l := range b.lines {
			if c := command(l); strings.Contains(c, " elect ") {
				elect = c // run on the cluster, below
			}
		}
	}
	for _, b := range readmeBlocks(t) {
		switch {
		case b.lang == "text":
			r.handTyped(b, live.tcp)
		case b.lang == "sh" && slicesContain(b.lines, "--raft-dir"):
			r.cluster(b, elect)
		case b.lang == "sh":
			for _, l := range b.lines {
				r.line(command(l), live, elect)
			}
		}
	}
}

func slicesContain(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// readmeRun is the state of TestReadmeCommands.
type readmeRun struct {
	t    *testing.T
	ctx  context.Context
	work string // the copy of the tree; bin/ is built here
}

type liveAddrs struct{ tcp, http string }

// line runs or checks one command of a plain sh block.
func (r *readmeRun) line(c string, live liveAddrs, elect string) {
	t := r.t
	if c == "" {
		return
	}
	for _, s := range skipped {
		if strings.HasPrefix(c, s.prefix) {
			t.Logf("skipped %q: %s", c, s.why)
			return
		}
	}
	rewrite := strings.NewReplacer("10.0.0.5:6388", live.tcp, "127.0.0.1:6388", live.tcp, "127.0.0.1:6389", live.http)
	switch {
	case c == "make build":
		// built first, in TestReadmeCommands
	case c == "latchd --version":
		if out := r.sh("bin/latchd --version"); !strings.HasPrefix(out, "latchd ") {
			t.Errorf("latchd --version: %q", out)
		}
	case strings.HasPrefix(c, "sudo install "):
		r.installSources(c)
	case c == elect:
		// run on the cluster
	case strings.HasPrefix(c, "latchctl "):
		cmd := rewrite.Replace("bin/" + c)
		if strings.Contains(c, " top ") {
			cmd += " --once" // top is a live view until interrupted
		}
		r.sh("LATCHD_ADDR=" + live.tcp + " " + cmd)
	case strings.HasPrefix(c, "bin/latchd-bench --addr"):
		// The README's sweep, shortened: the same flags, fewer workers and rounds.
		cmd := regexp.MustCompile(`--workers \S+`).ReplaceAllString(rewrite.Replace(c), "--workers 1,2")
		cmd = regexp.MustCompile(`--rounds \d+`).ReplaceAllString(cmd, "--rounds 20")
		r.sh(cmd)
	case c == "go run ./examples/zombie":
		r.sh(c + " -addr " + live.tcp) // the example's default is 127.0.0.1:6388
	default:
		t.Errorf("README command %q is neither run nor skipped by this test: add it to one", c)
	}
}

// installSources checks that what an install command copies exists after
// make build (it does not run: it writes to /usr/local and /etc).
func (r *readmeRun) installSources(c string) {
	for _, part := range strings.Split(c, "&&") {
		f := strings.Fields(part)
		var args []string
		for i := 2; i < len(f); i++ { // after "sudo install"
			if f[i] == "-m" {
				i++
				continue
			}
			args = append(args, f[i])
		}
		if len(args) < 2 {
			r.t.Errorf("%q: no source and destination", part)
			continue
		}
		for _, src := range args[:len(args)-1] {
			if _, err := os.Stat(filepath.Join(r.work, src)); err != nil {
				r.t.Errorf("%q installs %s, which make build does not leave: %v", strings.TrimSpace(part), src, err)
			}
		}
	}
	r.t.Logf("checked, not run %q: it writes to /usr/local and /etc", c)
}

// sh runs c with bash in the copy of the tree and returns its output; a
// failure fails the test.
func (r *readmeRun) sh(c string) string {
	r.t.Helper()
	out, err := r.bash(c)
	if err != nil {
		r.t.Fatalf("%s: %v\n%s", c, err, out)
	}
	r.t.Logf("ran %q", c)
	return out
}

// bash runs script in its own process group, killed whole if the test's
// deadline passes first.
func (r *readmeRun) bash(script string) (string, error) {
	return r.bashWithin(r.ctx, script)
}

func (r *readmeRun) bashWithin(ctx context.Context, script string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = r.work
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever it left behind; none when it went well
	}
	return out.String(), err
}

// startLatchd starts bin/latchd on free ports for the rest of the test.
func (r *readmeRun) startLatchd() liveAddrs {
	t := r.t
	live := liveAddrs{tcp: testport.Free(t), http: testport.Free(t)}
	_, port, _ := net.SplitHostPort(live.tcp)
	_, hport, _ := net.SplitHostPort(live.http)
	cmd := exec.Command(filepath.Join(r.work, "bin", "latchd"), "--port", port, "--http-port", hport, "--log-level", "warn")
	cmd.Dir = r.work
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // a graceful stop; Wait reaps it
		_ = cmd.Wait()
	})
	waitDial(t, r.ctx, live.tcp)
	waitDial(t, r.ctx, live.http)
	return live
}

func waitDial(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never accepted: %v", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// handTyped replays the hand-typed exchange against addr: the lines marked
// "<-" are sent three at a time, and each answer must read as the "->"
// line after them, with the documented token replaced by the one granted.
func (r *readmeRun) handTyped(b readmeBlock, addr string) {
	t := r.t
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	rd := bufio.NewReader(conn)
	tokenRe := regexp.MustCompile(`\b[0-9a-f]{32}\b`)
	var req []string
	var docToken, token string
	answers := 0
	for _, l := range b.lines {
		if sent, _, ok := strings.Cut(l, "<-"); ok {
			sent = strings.TrimSpace(sent)
			if docToken != "" {
				sent = strings.ReplaceAll(sent, docToken, token)
			}
			req = append(req, sent)
			continue
		}
		want, _, ok := strings.Cut(l, "->")
		if !ok {
			t.Errorf("hand-typed line %q is marked neither <- nor ->", l)
			continue
		}
		if len(req) != 3 {
			t.Fatalf("an answer after %d request lines %q, want 3", len(req), req)
		}
		if _, err := fmt.Fprintf(conn, "%s\n", strings.Join(req, "\n")); err != nil {
			t.Fatal(err)
		}
		req = nil
		got, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		got, want = strings.TrimSpace(got), strings.TrimSpace(want)
		if docToken == "" {
			docToken, token = tokenRe.FindString(want), tokenRe.FindString(got)
		}
		if docToken != "" {
			want = strings.ReplaceAll(want, docToken, token)
		}
		if got != want {
			t.Errorf("hand-typed exchange: server answered %q, README shows %q", got, want)
		}
		answers++
	}
	if answers != 2 {
		t.Errorf("hand-typed exchange: %d answers, want the lock's and the release's", answers)
	}
}

// cluster runs the cluster block as written, its ports mapped to free
// ones, twice in the same directory: the second start carries on from the
// logs of the first. Before the stop, the README's election runs on it.
func (r *readmeRun) cluster(b readmeBlock, elect string) {
	t := r.t
	ports := map[string][]string{}
	portRe := regexp.MustCompile(`\b(640|641|700)(\$i|[1-3])\b`)
	var pre strings.Builder
	for _, fam := range []string{"640", "641", "700"} {
		ps := []string{"0"}
		for range 3 {
			_, p, _ := net.SplitHostPort(testport.Free(t))
			ps = append(ps, p)
		}
		ports[fam] = ps
		fmt.Fprintf(&pre, "p%s=(%s)\n", fam, strings.Join(ps, " "))
	}
	var script strings.Builder
	script.WriteString("set -e\n" + pre.String())
	stopped := false
	for _, l := range b.lines {
		c := command(l)
		switch {
		case c == "make build":
			continue // built first, in TestReadmeCommands
		case strings.HasPrefix(c, "kill "):
			if elect != "" {
				seeds := fmt.Sprintf("127.0.0.1:%s,127.0.0.1:%s,127.0.0.1:%s", ports["640"][1], ports["640"][2], ports["640"][3])
				script.WriteString(strings.Replace("bin/"+elect, "n1:6388,n2:6388,n3:6388", seeds, 1) + "\n")
			}
			stopped = true
		}
		script.WriteString(portRe.ReplaceAllStringFunc(c, func(m string) string {
			sm := portRe.FindStringSubmatch(m)
			if sm[2] == "$i" {
				return "${p" + sm[1] + "[$i]}"
			}
			return ports[sm[1]][sm[2][0]-'0']
		}) + "\n")
	}
	if !stopped {
		t.Fatal("the cluster example does not show how to stop the nodes")
	}
	script.WriteString("wait\n") // the stop must end every node
	for run := 1; run <= 2; run++ {
		// A start, an election and a stop take seconds; a node the stop
		// missed would keep wait waiting.
		ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
		out, err := r.bashWithin(ctx, script.String())
		cancel()
		if err != nil {
			t.Fatalf("cluster example, start %d: %v\n%s\n%s", run, err, script.String(), out)
		}
		if n := strings.Count(out, "latchd stopped"); n != 3 || strings.Contains(out, "ERROR") {
			t.Fatalf("cluster example, start %d: %d nodes logged their stop, want 3 and no error:\n%s", run, n, out)
		}
		if run == 1 {
			t.Logf("cluster example ran (ports %v); starting it again on its logs", ports)
		}
	}
	if _, err := os.Stat(filepath.Join(r.work, "data", "n1")); err != nil {
		t.Errorf("the cluster example left no data/n1: %v", err)
	}
}

// copyTree copies the repository, minus .git and build outputs, into a
// temporary directory.
func copyTree(t *testing.T) string {
	t.Helper()
	src, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	skip := map[string]bool{".git": true, "bin": true, "dist": true, "data": true, "latchd": true, "latchctl": true, "latchd-bench": true}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if skip[rel] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
