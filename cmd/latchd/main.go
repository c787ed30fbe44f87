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
	"github.com/latchd/latchd/internal/budget"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/internal/fencefile"
	"github.com/latchd/latchd/internal/memtrim"
	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/replica"
	"github.com/latchd/latchd/server"
)

// trimIdle is how much freed memory the process may keep from the OS
// before memtrim gives it back (after a flood of large answers, say).
const trimIdle = 8 << 20

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

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
		fmt.Fprintf(stdout, "latchd %s\n", version)
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

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, o, ecfg, log); err != nil {
		log.Error("latchd stopped", zap.Error(err))
		return 1
	}
	return 0
}

// serve runs until ctx ends, then shuts everything down.
func serve(ctx context.Context, o *options, ecfg engine.Config, log *zap.Logger) error {
	var (
		eng   *engine.Engine
		node  *replica.Node
		engFn func() *engine.Engine
	)
	if o.raftDir != "" {
		var err error
		if node, err = startNode(o, ecfg, log); err != nil {
			return err
		}
		// Registered first: the node shuts down after the listeners, so
		// their connections' Disconnects can still be proposed.
		defer func() {
			if err := node.Shutdown(); err != nil {
				log.Warn("raft shutdown", zap.Error(err))
			}
		}()
		engFn = node.FSM().Engine
	} else {
		local, err := startEngine(o, &ecfg, log)
		if err != nil {
			return err
		}
		defer local.stop()
		eng = local.eng
		engFn = func() *engine.Engine { return eng }
	}
	scfg, _ := o.serverConfig() // validated by run
	reg := metrics.NewRegistryFunc(engFn)
	out := budget.New(scfg.MaxOutput) // unsent output, TCP and REST together
	reg.MustRegister(metrics.NewOutputCollector(out.Used, out.Max()))
	stopTrim := make(chan struct{})
	defer close(stopTrim)
	go memtrim.Run(stopTrim, time.Second, trimIdle, memtrim.Gauges{Held: out.Used, Made: out.Made})
	sopts := []server.Option{server.WithMetrics(reg.TCP()), server.WithOutputBudget(out)}
	if node != nil {
		sopts = append(sopts, server.WithCluster(node))
		reg.MustRegister(metrics.NewClusterCollector(func() metrics.ClusterSample {
			st := node.Status()
			return metrics.ClusterSample{Role: st.Role, Term: st.Term, CommitIndex: st.CommitIndex,
				AppliedIndex: st.AppliedIndex, LastLogIndex: st.LastLogIndex, LeaderChanges: st.LeaderChanges}
		}))
	}
	srv, err := server.New(scfg, eng, log.Named("tcp"), sopts...)
	if err != nil {
		return err
	}

	if err := srv.Start(); err != nil {
		return err
	}
	var web *httpfast.Server
	if o.httpPort != 0 {
		hcfg, _ := o.httpConfig() // validated by run
		hopts := []httpfast.Option{httpfast.WithConnections(srv.Connections), httpfast.WithMetrics(reg),
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
			_ = stopAll(srv, nil)
			return err
		}
	}
	if o.metricsAddr != "" { // the REST port serves /metrics too, when it is on
		stopMetrics, _, err := metrics.Serve(o.metricsAddr, reg, log.Named("metrics"))
		if err != nil {
			_ = stopAll(srv, web)
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = stopMetrics(ctx)
		}()
	}
	if o.debugAddr != "" {
		startDebug(o.debugAddr, log)
	}
	if node != nil && o.join != "" {
		go joinCluster(ctx, o, node, log.Named("join"))
	}
	log.Info("latchd listening", zap.String("tcp", srv.Addr()), zap.Bool("tls", scfg.TLS != nil),
		zap.String("version", version), zap.Int("shards", ecfg.Shards), zap.Bool("auth", scfg.AuthToken != ""))

	<-ctx.Done()
	log.Info("shutting down")
	return stopAll(srv, web)
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
// within 10 seconds.
func stopAll(srv *server.Server, web *httpfast.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
