// Command latchd runs the lock server: flags and LATCHD_* variables become
// the packages' Configs, then it wires engine, clock, TCP server and logs,
// and stops gracefully on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/httpfast"
	"github.com/latchd/latchd/internal/buildinfo"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/server"
)

// trimIdle is how much freed memory the process may keep from the OS
// before memtrim gives it back (after a flood of large answers, say).
const trimIdle = 8 << 20

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, getenv, io.Discard)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = parseOptions([]string{"-h"}, getenv, stderr)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "latchd: %v\n", err)
		return 2
	}
	if o.version {
		fmt.Fprintf(stdout, "latchd %s\n", buildinfo.Get()) // version, commit, Go version
		return 0
	}
	ecfg, err := o.engineConfig()
	if err == nil {
		_, err = o.serverConfig()
	}
	if err == nil && o.httpPort != 0 {
		_, err = o.httpConfig()
	}
	if err != nil {
		fmt.Fprintf(stderr, "latchd: %v\n", err)
		return 2
	}
	log, err := newLogger(o.logLevel, o.logFormat, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "latchd: %v\n", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	for _, w := range o.warnings {
		log.Warn("flag accepted for compatibility has no effect", zap.String("flag", "--"+w.flag), zap.String("why", w.why))
	}

	// A signal starts a graceful stop; a second one cuts its drain short.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		select {
		case sig := <-sigs:
			cancel(fmt.Errorf("signal %v", sig))
		case <-ctx.Done():
		}
	}()
	sum, err := serve(ctx, o, ecfg, log, sigs)
	sum.log(log, err)
	if err != nil {
		return 1
	}
	return 0
}

// stopSummary is what the one line latchd logs when it stops says.
type stopSummary struct {
	reason    string
	began     time.Time // the stop began; zero if latchd never served
	conns     int       // TCP connections open when everything closed
	sessions  int       // REST sessions open then
	leases    int       // leases still held then (dropped by the close)
	waiters   int       // waits answered error / 503 shutting_down
	drainedAt time.Duration
}

// log writes the one line: why latchd stopped and what it dropped.
func (s stopSummary) log(log *zap.Logger, err error) {
	fields := []zap.Field{zap.String("reason", s.reason)}
	if !s.began.IsZero() {
		fields = append(fields, zap.Int("connections_closed", s.conns), zap.Int("sessions_closed", s.sessions),
			zap.Int("leases_dropped", s.leases), zap.Int("waiters_answered", s.waiters),
			zap.Duration("drain", s.drainedAt), zap.Duration("elapsed", time.Since(s.began)))
	}
	if err != nil {
		log.Error("latchd stopped", append(fields, zap.Error(err))...)
		return
	}
	log.Info("latchd stopped", fields...)
}

// drain is the graceful part of a single node's stop: stop accepting TCP
// connections, answer every queued waiter and refuse new acquires, then
// give holders until timeout to release (0: until they have); a second
// signal cuts that short. REST keeps accepting, since a REST holder may
// release on a new connection. It returns how many waits were answered.
func drain(eng *engine.Engine, srv *server.Server, web *httpfast.Server, timeout time.Duration, sigs <-chan os.Signal) int {
	srv.StopAccepting()
	if web != nil {
		web.Drain()
	}
	n := eng.Drain(clock.Now())
	var deadline <-chan time.Time // 0: no deadline, as dflockd's 0 (a second signal still ends it)
	if timeout > 0 {
		deadline = time.After(timeout)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, g := eng.Metrics(); g.Held == 0 {
			break
		}
		select {
		case <-tick.C:
			continue
		case <-deadline:
		case <-sigs:
		}
		break
	}
	// The waiters' errors are queued on their connections: let them be
	// written before the close.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = srv.Settle(ctx)
	return n
}

// stopAll stops the listeners, releasing everything their clients held,
// within ctx.
func stopAll(ctx context.Context, srv *server.Server, web *httpfast.Server) error {
	var errs []error
	if web != nil {
		errs = append(errs, web.Stop(ctx))
	}
	errs = append(errs, srv.Stop(ctx))
	return errors.Join(errs...)
}

func newLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if format == "json" {
		enc = zapcore.NewJSONEncoder(ec)
	} else {
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}
