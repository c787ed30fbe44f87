package soak_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
	"github.com/latchd/latchd/soak"
)

// config returns the sizes of this run and logs which they are.
func config(t *testing.T) soak.Config {
	t.Helper()
	cfg := soak.FromEnv()
	if testing.Short() && cfg.Name == "short" {
		t.Skip("soak: skipped with -short")
	}
	t.Logf("soak sizes: %s (race detector: %v); LATCHD_SOAK=long or -tags soak for the long run", cfg.Name, soak.RaceEnabled)
	return cfg
}

// startServer starts an engine, its expiry clock and a TCP server on
// 127.0.0.1:0 like servertest.StartServer, with no key cap, idle keys
// collected after 100 ms and the run's read timeout, but with a silent
// logger: under -v, testutil logs every connection at debug level, and a
// soak opens tens of thousands.
func startServer(t *testing.T, cfg soak.Config) *servertest.Server {
	t.Helper()
	ecfg := engine.DefaultConfig()
	ecfg.MaxKeys = 0
	ecfg.MaxKeysPerOwner = 0 // no cap on keys, so none per connection (as latchd derives it)
	ecfg.GCMaxIdle = 100 * time.Millisecond
	ecfg.FenceSeed = uint64(clock.Now())
	scfg := server.DefaultConfig()
	scfg.Addr = "127.0.0.1:0"
	scfg.EventLoops = 2
	scfg.ReadTimeout = cfg.ReadTimeout
	eng, err := engine.New(ecfg)
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	srv, err := server.New(scfg, backend.NewLocal(eng), zap.NewNop())
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("server.Start: %v", err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); clock.Drive(stop, eng, 5*time.Millisecond) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Errorf("server.Stop: %v", err)
		}
		close(stop)
		<-done
	})
	return &servertest.Server{Addr: srv.Addr(), Engine: eng, TCP: srv}
}

// finish logs the report and fails the test on any violation.
func finish(t *testing.T, r *soak.Report) {
	t.Helper()
	r.Log(t, 30)
	if v := r.Violations(); len(v) > 0 {
		t.Errorf("%d invariant violations (listed above)", len(v))
	}
}

// gauges returns the engine gauges and open connections as one string.
func gauges(s *servertest.Server) string {
	_, g := s.Engine.Metrics()
	return fmt.Sprintf("keys=%d held=%d waiting=%d conns=%d", g.Keys, g.Held, g.Waiting, s.TCP.Connections())
}

// settled polls until the engine holds nothing, queues nothing, has
// collected every idle key and the server has no connection, and returns
// a violation if it does not get there within timeout.
func settled(s *servertest.Server, conns int, timeout time.Duration) []soak.Violation {
	ok := soak.PollUntil(timeout, func() bool {
		_, g := s.Engine.Metrics()
		return g.Held == 0 && g.Waiting == 0 && g.Keys == 0 && s.TCP.Connections() == conns
	})
	if ok {
		return nil
	}
	return []soak.Violation{{Check: "settle", Detail: fmt.Sprintf("after %v: %s, want keys=held=waiting=0 conns=%d", timeout, gauges(s), conns)}}
}
