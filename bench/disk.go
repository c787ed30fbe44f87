package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// diskMain measures the disk's own floor for a replicated op: appending
// 4 KiB to a file and fdatasyncing it, as a raft log append does. A
// cluster acquire+release commits two entries, so twice the p50 is the
// least a one-worker op can take on this disk. With --parallel N it also
// times N files appended and synced at once, one goroutine each: the
// nodes of a cluster that share one disk (as on a test machine) sync
// their logs at the same time, and that floor is the one they meet.
func diskMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("latchd-bench disk", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", os.TempDir(), "directory on the disk to measure")
	count := fs.Int("count", 500, "appends to time (per file)")
	parallel := fs.Int("parallel", 1, "also time this many files synced at once (the nodes of a cluster on one disk)")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if *count <= 0 || *parallel <= 0 {
		return fmt.Errorf("disk: --count and --parallel must be > 0")
	}
	lat, err := timeAppends(ctx, *dir, *count)
	if err != nil {
		return err
	}
	p50, p99 := percentiles(lat)
	fmt.Fprintf(stdout, "disk: 4 KiB append+fdatasync in %s: p50 %.3f ms, p99 %.3f ms (%d appends); "+
		"a one-worker cluster op's floor (two commits): %.3f ms\n",
		*dir, ms(p50), ms(p99), len(lat), 2*ms(p50))
	if *parallel == 1 {
		return nil
	}
	lat, err = timeParallel(ctx, *dir, *count, *parallel)
	if err != nil {
		return err
	}
	p50, p99 = percentiles(lat)
	fmt.Fprintf(stdout, "disk: %d files appended+fdatasynced at once: p50 %.3f ms, p99 %.3f ms (%d appends); "+
		"the floor with %d nodes on this one disk (two commits): %.3f ms\n",
		*parallel, ms(p50), ms(p99), len(lat), *parallel, 2*ms(p50))
	return nil
}

// percentiles sorts lat and returns its p50 and p99.
func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}

// timeParallel runs timeAppends on n files at once, one goroutine each,
// and returns every append's latency.
func timeParallel(ctx context.Context, dir string, count, n int) ([]time.Duration, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		all   []time.Duration
		first error
	)
	for range n {
		wg.Go(func() {
			lat, err := timeAppends(ctx, dir, count)
			mu.Lock()
			defer mu.Unlock()
			all = append(all, lat...)
			if first == nil {
				first = err
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return all, nil
}

// timeAppends appends count 4 KiB blocks to a fresh file in dir, each
// followed by fdatasync, and returns each append's latency.
func timeAppends(ctx context.Context, dir string, count int) ([]time.Duration, error) {
	f, err := os.CreateTemp(dir, "latchd-bench-disk-*")
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	lat := make([]time.Duration, 0, count)
	for i := 0; i < count && ctx.Err() == nil; i++ {
		start := time.Now()
		if _, err := f.Write(block); err != nil {
			return nil, fmt.Errorf("disk: %w", err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return nil, fmt.Errorf("disk: fdatasync: %w", err)
		}
		lat = append(lat, time.Since(start))
	}
	if len(lat) == 0 {
		return nil, ctx.Err()
	}
	return lat, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
