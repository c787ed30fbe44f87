package main

import (
	"context"
	"net"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
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

// daemon is one running latchd: what serve starts, in the order it starts
// it, and what stops it.
type daemon struct {
	o     *options
	ecfg  engine.Config
	log   *zap.Logger
	limit uint64 // the file descriptor limit; 0 when unknown

	// The state the listeners serve: a single node's engine, or a
	// cluster node.
	eng   *engine.Engine  // nil in cluster mode
	node  *replica.Node   // nil on a single node
	be    backend.Backend // what the front ends serve: node, or eng
	engFn func() *engine.Engine

	// What both front ends share.
	reg  *metrics.Registry
	lns  *listen.Set
	out  *budget.Budget // unsent output, TCP and REST together
	rd   *readiness
	scfg server.Config

	srv *server.Server
	web *httpfast.Server // nil without --http-port

	stops []func() // run last to first when serve returns
}

// onStop registers f to run when serve returns, before what was
// registered earlier.
func (d *daemon) onStop(f func()) { d.stops = append(d.stops, f) }

// spawn runs f in a goroutine until serve returns: then it closes stop
// and waits for f to return.
func (d *daemon) spawn(f func(stop <-chan struct{})) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); f(stop) }()
	d.onStop(func() { close(stop); <-done })
}

func (d *daemon) stop() {
	for i := len(d.stops) - 1; i >= 0; i-- {
		d.stops[i]()
	}
}

// serve runs until ctx ends, then shuts everything down. A signal on sigs
// during the drain cuts it short.
func serve(ctx context.Context, o *options, ecfg engine.Config, log *zap.Logger, sigs <-chan os.Signal) (sum stopSummary, err error) {
	sum.reason = "startup failed"
	d := &daemon{o: o, ecfg: ecfg, log: log}
	defer d.stop()
	if err := d.startState(); err != nil {
		return sum, err
	}
	d.instrument(ctx)
	if err := d.startTCP(ctx); err != nil {
		return sum, err
	}
	if err := d.startHTTP(); err != nil {
		_ = stopAll(context.Background(), d.srv, nil) // the start's error is the one to report
		return sum, err
	}
	if err := d.startSidecars(ctx); err != nil {
		_ = stopAll(context.Background(), d.srv, d.web) // the start's error is the one to report
		return sum, err
	}
	log.Info("latchd listening", zap.String("tcp", d.srv.Addr()), zap.Bool("tls", d.scfg.TLS != nil),
		zap.String("version", buildinfo.Get().Version), zap.Int("shards", d.ecfg.Shards), zap.Bool("auth", d.scfg.AuthToken != ""),
		zap.Uint64("fd_limit", d.limit), zap.Int("max_connections", o.maxConns), zap.Int("http_max_connections", o.httpMaxConns))
	<-ctx.Done()
	return d.shutdown(ctx, sigs)
}

// startState raises the descriptor limit (filling the connection caps
// from it), then starts what the listeners serve: the cluster node with
// --raft-dir, else the single node's engine with its clock and journal.
func (d *daemon) startState() error {
	limit, err := listen.RaiseNoFile()
	if err != nil {
		d.log.Warn("cannot read the file descriptor limit", zap.Error(err))
	} else {
		d.o.applyFDLimit(limit)
	}
	d.limit = limit
	if d.o.raftDir != "" {
		node, err := startNode(d.o, d.ecfg, d.log)
		if err != nil {
			return err
		}
		d.node, d.engFn, d.be = node, node.FSM().Engine, node
		// Registered first: the node shuts down after the listeners, so
		// their connections' Disconnects can still be proposed.
		d.onStop(func() {
			node.HandOff(handOffWait) // a leader hands over before it stops
			if err := node.Shutdown(); err != nil {
				d.log.Warn("raft shutdown", zap.Error(err))
			}
		})
		return nil
	}
	return d.startEngine()
}

// startEngine builds the single-node engine: the fence counter seeded from
// the journal or the clock, the journal's reservations kept, the expiry
// clock running.
func (d *daemon) startEngine() error {
	var journal *fencefile.Journal
	if d.o.fenceFile != "" {
		var err error
		journal, err = fencefile.Open(d.o.fenceFile, fencefile.WithClockFloor(uint64(time.Now().UnixNano())))
		if err != nil {
			return err // ErrLocked and ErrCorrupt name the file and say what to do
		}
		d.onStop(func() { _ = journal.Close() })
		if w := journal.Recovered(); w != nil {
			d.log.Warn("fence journal fell back to one slot", zap.Error(w))
		}
		d.ecfg.FenceSeed, d.ecfg.FenceLimit, d.ecfg.FenceReserve = journal.EngineHooks()
	} else {
		// Seeding the fence counter from the wall clock keeps tokens rising
		// across restarts as long as the clock does not step back.
		d.ecfg.FenceSeed = uint64(time.Now().UnixNano())
	}
	eng, err := engine.New(d.ecfg)
	if err != nil {
		return err
	}
	d.restoreEngine(eng)
	if journal != nil {
		d.spawn(func(stop <-chan struct{}) {
			journal.Keep(stop, eng.LastFence, eng.RaiseFenceLimit, func(err error) {
				d.log.Error("fence reservation failed", zap.String("file", journal.Path()), zap.Error(err))
			})
		})
	}
	d.spawn(func(stop <-chan struct{}) { clock.Drive(stop, eng, 10*time.Millisecond) })
	d.eng, d.engFn, d.be = eng, func() *engine.Engine { return eng }, backend.NewLocal(eng)
	return nil
}

// instrument builds what both front ends share: the metrics registry, the
// listener set, the output budget, readiness; and starts the refusal log
// and the memory trimmer.
func (d *daemon) instrument(ctx context.Context) {
	d.scfg, _ = d.o.serverConfig() // validated by run; the caps filled in since
	d.rd = &readiness{httpOn: d.o.httpPort != 0, node: d.node}
	go logRefusals(ctx.Done(), d.engFn, refusalLogEvery, d.log)
	d.reg = metrics.NewRegistryFunc(d.engFn)
	var lnMet *metrics.Listeners
	d.lns = listen.NewSet(d.log.Named("listen"), func(l, r string) { lnMet.AcceptError(l, r) })
	lnMet = d.reg.Listeners(d.lns.Down)
	if d.node != nil {
		node := d.node
		d.reg.MustRegister(metrics.NewClusterCollector(func() metrics.ClusterSample { return clusterSample(node) }))
	}

	d.out = budget.New(d.scfg.MaxOutput)
	d.reg.MustRegister(metrics.OutputCollectors(d.out.Used, d.out.Max())...)
	// Held counts the engine's entries too: a flood of waiters that goes
	// leaves garbage the runtime would not collect for minutes.
	held := func() int64 {
		n := d.out.Used()
		if e := d.engFn(); e != nil {
			n += e.HeapEstimate()
		}
		return n
	}
	d.spawn(func(stop <-chan struct{}) {
		memtrim.Run(stop, time.Second, trimIdle, memtrim.Gauges{Held: held, Made: d.out.Made})
	})
}

// clusterSample is what the cluster collector reports of node.
func clusterSample(node *replica.Node) metrics.ClusterSample {
	st := node.Status()
	return metrics.ClusterSample{Role: st.Role, Term: st.Term, CommitIndex: st.CommitIndex,
		AppliedIndex: st.AppliedIndex, LastLogIndex: st.LastLogIndex, LeaderChanges: st.LeaderChanges,
		ProposedEntries: st.ProposedEntries, ProposedCommands: st.ProposedCommands,
		BatchWaits: st.BatchWaits, BatchWaitTimeouts: st.BatchWaitTimeouts,
		SnapshotWriteFailures: st.SnapshotWriteFailures}
}

// startTCP starts the TCP server on the state.
func (d *daemon) startTCP(ctx context.Context) error {
	sopts := []server.Option{server.WithMetrics(d.reg.TCP()), server.WithOutputBudget(d.out), server.WithListeners(d.lns)}
	srv, err := server.New(d.scfg, d.be, d.log.Named("tcp"), sopts...)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	d.srv = srv
	d.rd.tcp.Store(true)
	go logConnRefusals(ctx.Done(), srv.Refused, 250*time.Millisecond, refusalLogEvery, d.scfg.MaxConnections, d.scfg.MaxConnectionsPerIP, d.log)
	return nil
}

// startHTTP starts the REST server with --http-port.
func (d *daemon) startHTTP() error {
	if d.o.httpPort == 0 {
		return nil
	}
	hcfg, _ := d.o.httpConfig() // validated by run
	hopts := []httpfast.Option{httpfast.WithConnections(d.srv.Connections), httpfast.WithMetrics(d.reg),
		httpfast.WithReadiness(d.rd.check), httpfast.WithListeners(d.lns),
		httpfast.WithOutputBudget(d.out)}
	hopts = append(hopts, d.snapshotOption()...)
	if d.node != nil && d.o.adminToken != "" {
		hopts = append(hopts, httpfast.WithAdmin(d.node, d.o.adminToken))
	}
	web, err := httpfast.New(hcfg, d.be, d.log.Named("http"), hopts...)
	if err == nil {
		err = web.Start()
	}
	if err != nil {
		return err
	}
	d.web = web
	d.rd.http.Store(true)
	return nil
}

// startSidecars starts what serves operators rather than clients:
// --metrics-addr, --debug-addr, and the --join requests.
func (d *daemon) startSidecars(ctx context.Context) error {
	if d.o.metricsAddr != "" { // the REST port serves /metrics too, when it is on
		stopMetrics, _, err := metrics.Serve(d.o.metricsAddr, d.reg, d.log.Named("metrics"), metrics.ServeConfig{
			Ready: d.rd.check, BearerToken: d.o.metricsToken(),
			Wrap: func(ln net.Listener) net.Listener { return d.lns.Wrap("metrics", ln) }})
		if err != nil {
			return err
		}
		d.onStop(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = stopMetrics(ctx) // stopping anyway; a slow scrape is cut off
		})
	}
	if d.o.debugAddr != "" {
		startDebug(d.o.debugAddr, d.lns, d.log)
	}
	if d.node != nil && d.o.join != "" {
		go joinCluster(ctx, d.o, d.node, d.log.Named("join"))
	}
	return nil
}

// shutdown is the stop once ctx has ended: not ready at once, then a
// single node's drain, then every listener closed. It returns what the
// stop line reports.
func (d *daemon) shutdown(ctx context.Context, sigs <-chan os.Signal) (sum stopSummary, err error) {
	d.rd.stopping.Store(true)
	sum.reason = context.Cause(ctx).Error()
	sum.began = time.Now()
	d.log.Info("shutting down", zap.String("reason", sum.reason), zap.Int("shutdown_timeout_s", d.o.shutdownTimeout))
	if d.eng != nil { // a single node drains; a cluster node withdraws its waits through the log in Stop
		sum.waiters = drain(d.eng, d.srv, d.web, secs(d.o.shutdownTimeout), sigs)
		sum.drainedAt = time.Since(sum.began)
	}
	sum.conns = d.srv.Connections()
	if d.web != nil {
		sum.sessions = d.web.Sessions()
	}
	if d.eng != nil {
		_, g := d.eng.Metrics()
		sum.leases = g.Held
	}
	// A single node closes in milliseconds, a cluster node proposes its
	// connections' cleanup through the log; the bound is for a wedged peer.
	bound := 2 * time.Second
	if d.node != nil {
		bound = 10 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	return sum, stopAll(sctx, d.srv, d.web)
}
