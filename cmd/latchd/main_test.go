package main

import (
	"bytes"
	"io"
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
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		logRefusals(stop, func() *engine.Engine { return eng }, 20*time.Millisecond, zap.New(core))
	}()
	defer func() { close(stop); <-done }()
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
