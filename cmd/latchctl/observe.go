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

	"github.com/latchd/latchd/client"
)

// errObserved ends an observe that printed --count reports.
var errObserved = errors.New("observed enough")

// runObserve prints the leader of the election NAME, then every change,
// until interrupted (or --count lines): "leader fence=F owner=KIND:ID" or
// "no leader".
func runObserve(fs *flag.FlagSet, c *common, args []string, stdout io.Writer) error {
	count := fs.Int("count", 0, "stop after this many lines (0: until interrupted)")
	pos, cmd, err := parse(fs, args)
	if err == nil && (len(pos) != 1 || cmd != nil) {
		err = usagef("observe takes one NAME")
	}
	if err != nil {
		return err
	}
	opts, err := c.options()
	if err != nil {
		return usagef("%v", err)
	}
	e := &client.Election{Name: pos[0], Options: opts}
	setTarget(c, &e.Servers, &e.Cluster)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	n := 0
	err = e.Observe(ctx, func(l client.Leader) {
		if l.Present {
			fmt.Fprintf(stdout, "leader fence=%d owner=%s:%d\n", l.Fence, l.OwnerKind, l.Owner)
		} else {
			fmt.Fprintln(stdout, "no leader")
		}
		if n++; *count > 0 && n >= *count {
			cancel(errObserved)
		}
	})
	if errors.Is(context.Cause(ctx), errObserved) || errors.Is(err, context.Canceled) {
		return nil // done, or interrupted: observing has no failure to report
	}
	return err
}
