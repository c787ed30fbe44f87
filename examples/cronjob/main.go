// Command cronjob runs a scheduled job exactly once across many hosts.
//
// cron fires the same job on every host at the same minute. Each instance
// tries the lock once (AcquireTimeout 0): one wins and runs the job, the
// others skip. The winner's lease is renewed in the background while the
// job runs; if it is lost anyway (the server went away, the process
// stalled past its lease), Lost fires and the job stops, because another
// instance may now start it.
//
// This program starts -instances copies in one process to show the race;
// in production each host runs one.
//
//	go run ./examples/cronjob -addr 127.0.0.1:6388 -instances 3
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/latchd/latchd/client"
)

func main() {
	addr := flag.String("addr", client.DefaultAddr, "latchd server address")
	instances := flag.Int("instances", 3, "simulated hosts")
	flag.Parse()

	var wg sync.WaitGroup
	for i := range *instances {
		wg.Go(func() {
			if err := runOnce(*addr, fmt.Sprintf("host-%d", i+1)); err != nil {
				log.Print(err)
			}
		})
	}
	wg.Wait()
}

func runOnce(addr, host string) error {
	lock := &client.Lock{
		Key:            "cron:nightly-report",
		AcquireTimeout: 0,  // try once: if someone else runs it, skip
		LeaseTTL:       10, // renewed every 5 s while the job runs
		Servers:        []string{addr},
	}
	ctx := context.Background()
	got, err := lock.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", host, err)
	}
	if !got {
		fmt.Printf("%s: another host runs the job; skipping\n", host)
		return nil
	}
	defer func() {
		if err := lock.Release(ctx); err != nil {
			log.Printf("%s: release: %v", host, err)
		}
	}()

	// The job stops as soon as the lease is lost.
	jobCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-lock.Lost():
			cancel()
		case <-jobCtx.Done():
		}
	}()
	fmt.Printf("%s: running the job (fence %d)\n", host, lock.Fence())
	if err := job(jobCtx); err != nil {
		return fmt.Errorf("%s: job: %w (lease: %v)", host, err, lock.Err())
	}
	fmt.Printf("%s: job done\n", host)
	return nil
}

// job stands for the real work: it checks ctx between steps.
func job(ctx context.Context) error {
	for step := range 3 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
			fmt.Printf("  step %d/3\n", step+1)
		}
	}
	return nil
}
