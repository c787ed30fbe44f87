package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/fencefile"
	"github.com/latchd/latchd/internal/metrics"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFlagsWinOverEnv(t *testing.T) {
	o, err := parseOptions([]string{"--port", "7000"}, env(map[string]string{
		"LATCHD_PORT":                       "7001",
		"LATCHD_MAX_LOCKS":                  "5",
		"LATCHD_AUTO_RELEASE_ON_DISCONNECT": "false",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.port != 7000 {
		t.Errorf("port = %d, want the flag's 7000", o.port)
	}
	if o.maxLocks != 5 {
		t.Errorf("max locks = %d, want LATCHD_MAX_LOCKS=5", o.maxLocks)
	}
	if o.autoRelease {
		t.Error("auto release should come from the environment (false)")
	}
	sc, err := o.serverConfig()
	if err != nil || sc.Addr != "127.0.0.1:7000" {
		t.Errorf("server config %+v, %v", sc, err)
	}
	ec, err := o.engineConfig()
	if err != nil || ec.MaxKeys != 5 || ec.DefaultTTL != 33*time.Second {
		t.Errorf("engine config %+v, %v", ec, err)
	}
}

func TestAuthTokenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(p, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseOptions([]string{"--auth-token-file", p}, env(nil), &bytes.Buffer{})
	if err != nil || o.authToken != "s3cret" {
		t.Fatalf("token %q, err %v", o.authToken, err)
	}
}

func TestBadInputExitsTwo(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "unknown flag", args: []string{"--nope"}, want: "flag provided but not defined"},
		{name: "bad integer", args: []string{"--port", "x"}, want: "invalid value"},
		{name: "bad env", env: map[string]string{"LATCHD_MAX_LOCKS": "many"}, want: "LATCHD_MAX_LOCKS"},
		{name: "missing token file", args: []string{"--auth-token-file", "/nonexistent/tok"}, want: "auth token file"},
		{name: "shards not a power of two", args: []string{"--shards", "3"}, want: "power of two"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, want: "log-format"},
		{name: "tls cert without key", args: []string{"--tls-cert", "c.pem"}, want: "go together"},
		{name: "extra argument", args: []string{"serve"}, want: "unexpected argument"},
		{name: "cluster on a wildcard host", args: []string{"--host", "0.0.0.0", "--raft-dir", "d", "--node-id", "n1"},
			want: "set --advertise-addr"},
		{name: "cluster REST on a wildcard host", args: []string{"--host", "::", "--http-port", "6389",
			"--advertise-addr", "10.0.0.1:6388", "--raft-dir", "d", "--node-id", "n1"}, want: "set --advertise-http-addr"},
		{name: "bad advertise-http-addr", args: []string{"--raft-dir", "d", "--node-id", "n1",
			"--advertise-http-addr", "nohost"}, want: "--advertise-http-addr"},
		{name: "advertise without cluster", args: []string{"--advertise-http-addr", "10.0.0.1:6389"}, want: "needs --raft-dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, env(tt.env), &out, &errb)
			if code != 2 {
				t.Fatalf("exit code %d, want 2 (stderr %q)", code, errb.String())
			}
			msg := errb.String()
			if strings.Count(msg, "\n") != 1 || !strings.Contains(msg, tt.want) {
				t.Fatalf("stderr %q: want one line containing %q", msg, tt.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--version"}, env(nil), &out, &bytes.Buffer{}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// "latchd v1.2.3 (commit 0123abc, go1.26.8)": version, commit and the
	// Go version, whether stamped or read from the build info.
	if got := out.String(); !strings.HasPrefix(got, "latchd ") || !strings.Contains(got, "(commit ") || !strings.Contains(got, runtime.Version()) {
		t.Fatalf("version output %q", got)
	}
}

func TestAdvertisedAddrs(t *testing.T) {
	base := []string{"--raft-dir", "d", "--node-id", "n1", "--http-port", "6389"}
	for _, tt := range []struct {
		args             []string
		client, restAddr string
	}{
		{args: base, client: "127.0.0.1:6388", restAddr: "127.0.0.1:6389"},
		{args: append([]string{"--host", "0.0.0.0", "--advertise-addr", "10.0.0.7:6388",
			"--advertise-http-addr", "lock1.example:443"}, base...),
			client: "10.0.0.7:6388", restAddr: "lock1.example:443"},
	} {
		o, err := parseOptions(tt.args, env(nil), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if o.clientAddr() != tt.client || o.httpAddr() != tt.restAddr {
			t.Errorf("%v: client %q, REST %q; want %q, %q", tt.args, o.clientAddr(), o.httpAddr(), tt.client, tt.restAddr)
		}
	}
}

// TestLogRefusals: refusals at the caps are logged, once per interval
// with the count, and not when there were none.
func TestLogRefusals(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.MaxKeys, cfg.MaxWaiters = 1, 1
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	acq := func(key string, owner engine.OwnerID) error {
		_, err := eng.Acquire(0, engine.AcquireReq{Key: []byte(key), Owner: owner, Limit: 1, TTL: time.Minute, Timeout: time.Minute}, nopSink{})
		return err
	}
	_ = acq("a", 1)
	_ = acq("a", 2)
	for i := range 3 {
		if err := acq("b", engine.OwnerID(10+i)); err != engine.ErrMaxKeys {
			t.Fatalf("b: %v", err)
		}
	}
	if err := acq("a", 3); err != engine.ErrMaxWaiters {
		t.Fatalf("a: %v", err)
	}
	// Started after the refusals, so that one interval has them all
	// (a slow test could otherwise split them over two): the first tick
	// counts from zero.
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		logRefusals(stop, func() *engine.Engine { return eng }, 20*time.Millisecond, zap.New(core))
	}()
	defer func() { close(stop); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for logs.FilterMessageSnippet("--max-waiters").Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	keys := logs.FilterMessageSnippet("--max-locks").AllUntimed()
	if len(keys) != 1 || keys[0].ContextMap()["refused"] != uint64(3) || logs.FilterMessageSnippet("--max-waiters").Len() != 1 {
		t.Fatalf("logged %v; want one --max-locks line with refused=3 and one --max-waiters line", logs.AllUntimed())
	}
	time.Sleep(60 * time.Millisecond) // three more intervals with no refusal
	if n := logs.Len(); n != 2 {
		t.Fatalf("logged %d lines; want no more without new refusals", n)
	}
}

type nopSink struct{}

func (nopSink) Deliver(engine.Outcome) {}

// TestReadiness: not ready until both listeners accept, nor once stopping.
func TestReadiness(t *testing.T) {
	r := &readiness{httpOn: true}
	if r.check() == nil {
		t.Fatal("ready before the listeners")
	}
	r.tcp.Store(true)
	if r.check() == nil {
		t.Fatal("ready before the REST listener")
	}
	r.http.Store(true)
	if err := r.check(); err != nil {
		t.Fatalf("not ready with both listeners: %v", err)
	}
	r.stopping.Store(true)
	if r.check() == nil {
		t.Fatal("ready while stopping")
	}
}

// TestAuthSecretTooLongForTCP: a secret that cannot fit on the 256-byte
// auth line is refused at startup, whichever way it is given; 256 bytes
// is accepted.
func TestAuthSecretTooLongForTCP(t *testing.T) {
	long := strings.Repeat("s", 257)
	p := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(p, []byte(long+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "flag", args: []string{"--auth-token", long}, want: "--auth-token is 257 bytes"},
		{name: "file", args: []string{"--auth-token-file", p}, want: "--auth-token-file " + p + " is 257 bytes"},
		{name: "env", env: map[string]string{"LATCHD_AUTH_TOKEN": long}, want: "LATCHD_AUTH_TOKEN is 257 bytes"},
		{name: "env file", env: map[string]string{"LATCHD_AUTH_TOKEN_FILE": p}, want: "LATCHD_AUTH_TOKEN_FILE=" + p},
		{name: "line break", args: []string{"--auth-token", "a\nb"}, want: "line break"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// parseOptions, not run: without the check run would serve.
			_, err := parseOptions(tt.args, env(tt.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parseOptions: %v; want an error containing %q", err, tt.want)
			}
		})
	}
	o, err := parseOptions([]string{"--auth-token", strings.Repeat("s", 256)}, env(nil), io.Discard)
	if err != nil {
		t.Fatalf("a 256-byte secret: %v", err)
	}
	if _, err := o.serverConfig(); err != nil {
		t.Fatalf("a 256-byte secret: server config: %v", err)
	}
}

// TestMetricsAddrNeedsToken: with auth on, --metrics-addr answers 401
// without the bearer token, unless --metrics-public.
func TestMetricsAddrNeedsToken(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want int
	}{
		{name: "auth on", args: []string{"--auth-token", "s3cret"}, want: http.StatusUnauthorized},
		{name: "metrics public", args: []string{"--auth-token", "s3cret", "--metrics-public"}, want: http.StatusOK},
		{name: "auth off", want: http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, env(nil), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			stop, addr, err := metrics.Serve("127.0.0.1:0", metrics.NewRegistry(nil), zap.NewNop(),
				metrics.ServeConfig{BearerToken: o.metricsToken()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = stop(context.Background()) })
			hc := &http.Client{Timeout: 5 * time.Second}
			resp, err := hc.Get("http://" + addr + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("GET /metrics without a token = %d; want %d", resp.StatusCode, tt.want)
			}
		})
	}
}

// TestAuthLimitFlags: the failed-auth limit and the per-IP session cap
// reach both servers' configs, with their defaults.
func TestAuthLimitFlags(t *testing.T) {
	o, err := parseOptions(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := o.serverConfig()
	hc, _ := o.httpConfig()
	if sc.AuthFailuresPerMinute != 60 || hc.AuthFailuresPerMinute != 60 || hc.MaxSessionsPerIP != 1000 {
		t.Fatalf("defaults: tcp %d, http %d failures/min, %d sessions/IP; want 60, 60, 1000",
			sc.AuthFailuresPerMinute, hc.AuthFailuresPerMinute, hc.MaxSessionsPerIP)
	}
	o, err = parseOptions([]string{"--auth-failures-per-minute", "5", "--http-max-sessions-per-ip", "7"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sc, _ = o.serverConfig()
	hc, _ = o.httpConfig()
	if sc.AuthFailuresPerMinute != 5 || hc.AuthFailuresPerMinute != 5 || hc.MaxSessionsPerIP != 7 {
		t.Fatalf("flags: tcp %d, http %d failures/min, %d sessions/IP; want 5, 5, 7",
			sc.AuthFailuresPerMinute, hc.AuthFailuresPerMinute, hc.MaxSessionsPerIP)
	}
}

// TestClusterFenceFloorFromJournal: in cluster mode --fence-state-file is
// accepted and read as the cluster's fence floor: at least what the
// single node that kept it could have issued.
func TestClusterFenceFloorFromJournal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fence.state")
	ahead := uint64(time.Now().Add(48 * time.Hour).UnixNano())
	j, err := fencefile.Open(p, fencefile.WithClockFloor(ahead))
	if err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
	if _, err := parseOptions([]string{"--raft-dir", t.TempDir(), "--node-id", "n1", "--fence-state-file", p}, env(nil), io.Discard); err != nil {
		t.Fatalf("cluster mode with --fence-state-file: %v", err)
	}
	floor, err := fenceFloor(p)
	if err != nil || floor < ahead {
		t.Fatalf("fenceFloor = %d, %v; want at least %d", floor, err, ahead)
	}
}
