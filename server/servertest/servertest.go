// Package servertest starts in-process latchd servers on loopback for
// tests: a single node (StartServer) or a cluster of replicated nodes
// (StartCluster), each with its TCP server. Only _test.go files import it.
package servertest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/server"
)

// Server is a running engine, its expiry clock and a TCP server.
type Server struct {
	Addr   string
	Engine *engine.Engine
	TCP    *server.Server
}

// Option adjusts the configs before the server starts.
type Option func(*engine.Config, *server.Config)

// StartServer starts an engine and a TCP server on 127.0.0.1:0 and stops
// both when the test ends. The clock ticks every 5 ms.
func StartServer(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	return StartServerWith(tb, nil, opts...)
}

// StartServerWith is StartServer with options for server.New, such as
// server.WithMetrics.
func StartServerWith(tb testing.TB, sopts []server.Option, opts ...Option) *Server {
	tb.Helper()
	ecfg := engine.DefaultConfig()
	scfg := server.DefaultConfig()
	scfg.Addr = "127.0.0.1:0"
	scfg.EventLoops = 2
	for _, o := range opts {
		o(&ecfg, &scfg)
	}
	ecfg.FenceSeed = uint64(clock.Now())
	eng, err := engine.New(ecfg)
	if err != nil {
		tb.Fatalf("engine.New: %v", err)
	}
	log := zap.NewNop()
	if _, ok := tb.(*testing.T); ok && testing.Verbose() {
		log = zaptest.NewLogger(tb, zaptest.Level(zap.DebugLevel))
	}
	srv, err := server.New(scfg, backend.NewLocal(eng), log, sopts...)
	if err != nil {
		tb.Fatalf("server.New: %v", err)
	}
	if err := srv.Start(); err != nil {
		tb.Fatalf("server.Start: %v", err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); clock.Drive(stop, eng, 5*time.Millisecond) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			tb.Errorf("server.Stop: %v", err)
		}
		close(stop)
		<-done
	})
	return &Server{Addr: srv.Addr(), Engine: eng, TCP: srv}
}
