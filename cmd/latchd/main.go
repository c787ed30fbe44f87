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
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/internal/fencefile"
	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/server"
)

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
	var journal *fencefile.Journal
	if o.fenceFile != "" {
		var err error
		journal, err = fencefile.Open(o.fenceFile, fencefile.WithClockFloor(uint64(time.Now().UnixNano())))
		if err != nil {
			return err // ErrLocked and ErrCorrupt name the file and say what to do
		}
		defer journal.Close() // registered first: runs after Keep and the servers stop
		if w := journal.Recovered(); w != nil {
			log.Warn("fence journal fell back to one slot", zap.Error(w))
		}
		ecfg.FenceSeed, ecfg.FenceLimit, ecfg.FenceReserve = journal.EngineHooks()
	} else {
		// Seeding the fence counter from the wall clock keeps tokens rising
		// across restarts as long as the clock does not step back.
		ecfg.FenceSeed = uint64(time.Now().UnixNano())
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		return err
	}
	if journal != nil {
		stopKeep, keepDone := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(keepDone)
			journal.Keep(stopKeep, eng.LastFence, eng.RaiseFenceLimit, func(err error) {
				log.Error("fence reservation failed", zap.String("file", journal.Path()), zap.Error(err))
			})
		}()
		defer func() { close(stopKeep); <-keepDone }()
	}
	scfg, _ := o.serverConfig() // validated by run
	reg := metrics.NewRegistry(eng)
	srv, err := server.New(scfg, eng, log.Named("tcp"), server.WithMetrics(reg.TCP()))
	if err != nil {
		return err
	}
	stopClock := make(chan struct{})
	clockDone := make(chan struct{})
	go func() { defer close(clockDone); clock.Drive(stopClock, eng, 10*time.Millisecond) }()
	defer func() { close(stopClock); <-clockDone }()

	if err := srv.Start(); err != nil {
		return err
	}
	var web *httpfast.Server
	if o.httpPort != 0 {
		hcfg, _ := o.httpConfig() // validated by run
		web, err = httpfast.New(hcfg, eng, log.Named("http"),
			httpfast.WithConnections(srv.Connections), httpfast.WithMetrics(reg))
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
	log.Info("latchd listening", zap.String("tcp", srv.Addr()), zap.Bool("tls", scfg.TLS != nil),
		zap.String("version", version), zap.Int("shards", ecfg.Shards), zap.Bool("auth", scfg.AuthToken != ""))

	<-ctx.Done()
	log.Info("shutting down")
	return stopAll(srv, web)
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
