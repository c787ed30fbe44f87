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
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/httpfast"
	"github.com/latchd/latchd/internal/budget"
	"github.com/latchd/latchd/internal/buildinfo"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/internal/fencefile"
	"github.com/latchd/latchd/internal/listen"
	"github.com/latchd/latchd/internal/memtrim"
	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/replica"
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

// serve runs until ctx ends, then shuts everything down. A signal on sigs
// during the drain cuts it short.
func serve(ctx context.Context, o *options, ecfg engine.Config, log *zap.Logger, sigs <-chan os.Signal) (sum stopSummary, err error) {
	sum.reason = "startup failed"
	limit, lerr := listen.RaiseNoFile()
	if lerr != nil {
		log.Warn("cannot read the file descriptor limit", zap.Error(lerr))
	} else {
		o.applyFDLimit(limit)
	}
	var (
		eng   *engine.Engine
		node  *replica.Node
		engFn func() *engine.Engine
	)
	if o.raftDir != "" {
		if node, err = startNode(o, ecfg, log); err != nil {
			return sum, err
		}
		// Registered first: the node shuts down after the listeners, so
		// their connections' Disconnects can still be proposed.
		defer func() {
			node.HandOff(handOffWait) // a leader hands over before it stops
			if err := node.Shutdown(); err != nil {
				log.Warn("raft shutdown", zap.Error(err))
			}
		}()
		engFn = node.FSM().Engine
	} else {
		local, err := startEngine(o, &ecfg, log)
		if err != nil {
			return sum, err
		}
		defer local.stop()
		eng = local.eng
		engFn = func() *engine.Engine { return eng }
	}
	scfg, _ := o.serverConfig() // validated by run; the caps filled in since
	rd := &readiness{httpOn: o.httpPort != 0, node: node}
	go logRefusals(ctx.Done(), engFn, refusalLogEvery, log)
	reg := metrics.NewRegistryFunc(engFn)
	var lnMet *metrics.Listeners
	lns := listen.NewSet(log.Named("listen"), func(l, r string) { lnMet.AcceptError(l, r) })
	lnMet = reg.Listeners(lns.Down)

	out := budget.New(scfg.MaxOutput) // unsent output, TCP and REST together
	reg.MustRegister(metrics.NewOutputCollector(out.Used, out.Max()))
	stopTrim := make(chan struct{})
	defer close(stopTrim)
	// Held counts the engine's entries too: when a flood of waiters goes
	// (1,000 connections x 1,024 keys, then all closed), ~150 MB become
	// garbage that was live at the last collection, so neither the quiet
	// rule nor the runtime notices it, and it stayed in use until the
	// forced collection two minutes later (#11).
	held := func() int64 {
		n := out.Used()
		if e := engFn(); e != nil {
			n += e.HeapEstimate()
		}
		return n
	}
	go memtrim.Run(stopTrim, time.Second, trimIdle, memtrim.Gauges{Held: held, Made: out.Made})
	sopts := []server.Option{server.WithMetrics(reg.TCP()), server.WithOutputBudget(out), server.WithListeners(lns)}
	if node != nil {
		sopts = append(sopts, server.WithCluster(node))
		reg.MustRegister(metrics.NewClusterCollector(func() metrics.ClusterSample {
			st := node.Status()
			return metrics.ClusterSample{Role: st.Role, Term: st.Term, CommitIndex: st.CommitIndex,
				AppliedIndex: st.AppliedIndex, LastLogIndex: st.LastLogIndex, LeaderChanges: st.LeaderChanges,
				ProposedEntries: st.ProposedEntries, ProposedCommands: st.ProposedCommands,
				BatchWaits: st.BatchWaits, BatchWaitTimeouts: st.BatchWaitTimeouts,
				SnapshotWriteFailures: st.SnapshotWriteFailures}
		}))
	}
	srv, err := server.New(scfg, eng, log.Named("tcp"), sopts...)
	if err != nil {
		return sum, err
	}

	if err := srv.Start(); err != nil {
		return sum, err
	}
	rd.tcp.Store(true)
	go logConnRefusals(ctx.Done(), srv.Refused, 250*time.Millisecond, refusalLogEvery, scfg.MaxConnections, scfg.MaxConnectionsPerIP, log)
	var web *httpfast.Server
	if o.httpPort != 0 {
		hcfg, _ := o.httpConfig() // validated by run
		hopts := []httpfast.Option{httpfast.WithConnections(srv.Connections), httpfast.WithMetrics(reg),
			httpfast.WithReadiness(rd.check), httpfast.WithListeners(lns),
			httpfast.WithOutputBudget(out)}
		if node != nil {
			hopts = append(hopts, httpfast.WithCluster(node))
			if o.adminToken != "" {
				hopts = append(hopts, httpfast.WithAdmin(node, o.adminToken))
			}
		}
		web, err = httpfast.New(hcfg, eng, log.Named("http"), hopts...)
		if err == nil {
			err = web.Start()
		}
		if err != nil {
			_ = stopAll(context.Background(), srv, nil)
			return sum, err
		}
		rd.http.Store(true)
	}
	if o.metricsAddr != "" { // the REST port serves /metrics too, when it is on
		mopts := append(o.metricsOptions(), metrics.WithReadiness(rd.check),
			metrics.WithListenerWrap(func(ln net.Listener) net.Listener { return lns.Wrap("metrics", ln) }))
		stopMetrics, _, err := metrics.Serve(o.metricsAddr, reg, log.Named("metrics"), mopts...)
		if err != nil {
			_ = stopAll(context.Background(), srv, web)
			return sum, err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = stopMetrics(ctx)
		}()
	}
	if o.debugAddr != "" {
		startDebug(o.debugAddr, lns, log)
	}
	if node != nil && o.join != "" {
		go joinCluster(ctx, o, node, log.Named("join"))
	}
	log.Info("latchd listening", zap.String("tcp", srv.Addr()), zap.Bool("tls", scfg.TLS != nil),
		zap.String("version", buildinfo.Get().Version), zap.Int("shards", ecfg.Shards), zap.Bool("auth", scfg.AuthToken != ""),
		zap.Uint64("fd_limit", limit), zap.Int("max_connections", o.maxConns), zap.Int("http_max_connections", o.httpMaxConns))

	<-ctx.Done()
	rd.stopping.Store(true)
	sum.reason = context.Cause(ctx).Error()
	sum.began = time.Now()
	log.Info("shutting down", zap.String("reason", sum.reason), zap.Int("shutdown_timeout_s", o.shutdownTimeout))
	if eng != nil { // a single node drains; a cluster node withdraws its waits through the log in Stop
		sum.waiters = drain(eng, srv, web, secs(o.shutdownTimeout), sigs)
		sum.drainedAt = time.Since(sum.began)
	}
	sum.conns = srv.Connections()
	if web != nil {
		sum.sessions = web.Sessions()
	}
	if eng != nil {
		_, g := eng.Metrics()
		sum.leases = g.Held
	}
	// Closing is quick (milliseconds); the bound is for a wedged peer.
	ctx, cancel := context.WithTimeout(context.Background(), stopBudget(node != nil))
	defer cancel()
	return sum, stopAll(ctx, srv, web)
}

// stopBudget bounds closing everything after the drain: a single node
// closes in milliseconds; a cluster node proposes its connections'
// cleanup through the log, as before --shutdown-timeout existed.
func stopBudget(cluster bool) time.Duration {
	if cluster {
		return 10 * time.Second
	}
	return 2 * time.Second
}

// drain is the graceful part of a single node's stop: stop accepting TCP
// connections, answer every queued waiter (TCP error, REST 503
// shutting_down) and refuse new acquires, then give holders until timeout
// to release (0: until they have, as in dflockd); a second signal cuts
// that short. The REST listener keeps
// accepting, because a REST holder may release on a new connection. It
// returns how many waits were answered.
func drain(eng *engine.Engine, srv *server.Server, web *httpfast.Server, timeout time.Duration, sigs <-chan os.Signal) int {
	srv.StopAccepting()
	if web != nil {
		web.Drain()
	}
	n := eng.Drain(clock.Now())
	var deadline <-chan time.Time // 0: no deadline, as dflockd's 0 (a second signal still ends it)
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
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

// localEngine is a single node's engine with what keeps it: the expiry
// clock and, with --fence-state-file, the fence journal.
type localEngine struct {
	eng   *engine.Engine
	stops []func()
}

func (l *localEngine) stop() {
	for i := len(l.stops) - 1; i >= 0; i-- {
		l.stops[i]()
	}
}

// startEngine builds the single-node engine: the fence counter seeded from
// the journal or the clock, the journal's reservations kept, the expiry
// clock running.
func startEngine(o *options, ecfg *engine.Config, log *zap.Logger) (*localEngine, error) {
	l := &localEngine{}
	var journal *fencefile.Journal
	if o.fenceFile != "" {
		var err error
		journal, err = fencefile.Open(o.fenceFile, fencefile.WithClockFloor(uint64(time.Now().UnixNano())))
		if err != nil {
			return nil, err // ErrLocked and ErrCorrupt name the file and say what to do
		}
		l.stops = append(l.stops, func() { _ = journal.Close() })
		if w := journal.Recovered(); w != nil {
			log.Warn("fence journal fell back to one slot", zap.Error(w))
		}
		ecfg.FenceSeed, ecfg.FenceLimit, ecfg.FenceReserve = journal.EngineHooks()
	} else {
		// Seeding the fence counter from the wall clock keeps tokens rising
		// across restarts as long as the clock does not step back.
		ecfg.FenceSeed = uint64(time.Now().UnixNano())
	}
	eng, err := engine.New(*ecfg)
	if err != nil {
		l.stop()
		return nil, err
	}
	l.eng = eng
	if journal != nil {
		stopKeep, keepDone := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(keepDone)
			journal.Keep(stopKeep, eng.LastFence, eng.RaiseFenceLimit, func(err error) {
				log.Error("fence reservation failed", zap.String("file", journal.Path()), zap.Error(err))
			})
		}()
		l.stops = append(l.stops, func() { close(stopKeep); <-keepDone })
	}
	stopClock, clockDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(clockDone); clock.Drive(stopClock, eng, 10*time.Millisecond) }()
	l.stops = append(l.stops, func() { close(stopClock); <-clockDone })
	return l, nil
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
