// Command latchd-bench load-tests a lock server that speaks the three-line
// protocol (or latchd's REST API, or Redis for comparison) and prints
// throughput and latency tables. It is a thin main over package bench; run
// "latchd-bench help" for the subcommands and docs/bench.md for a guide.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/latchd/latchd/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
