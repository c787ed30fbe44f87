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
// their logs at the same time, and that floor is the one they meet. With
// --prealloc it also times the writes into space filled with zeros and
// synced beforehand, as latchd's log writes its preallocated segments: no
// size or extent to change, so a sync flushes the data alone.
func diskMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("latchd-bench disk", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", os.TempDir(), "directory on the disk to measure")
	count := fs.Int("count", 500, "appends to time (per file)")
	parallel := fs.Int("parallel", 1, "also time this many files synced at once (the nodes of a cluster on one disk)")
	prealloc := fs.Bool("prealloc", false, "also time writes into preallocated space, as latchd's log writes")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if *count <= 0 || *parallel <= 0 {
		return fmt.Errorf("disk: --count and --parallel must be > 0")
	}
	kinds := []bool{false}
	if *prealloc {
		kinds = append(kinds, true)
	}
	for _, pre := range kinds {
		what := "4 KiB append+fdatasync"
		if pre {
			what = "4 KiB write+fdatasync into preallocated space"
		}
		lat, err := timeParallel(ctx, *dir, *count, 1, pre)
		if err != nil {
			return err
		}
		p50, p99 := percentiles(lat)
		fmt.Fprintf(stdout, "disk: %s in %s: p50 %.3f ms, p99 %.3f ms (%d writes); "+
			"a one-worker cluster op's floor (two commits): %.3f ms\n",
			what, *dir, ms(p50), ms(p99), len(lat), 2*ms(p50))
		if *parallel == 1 {
			continue
		}
		if lat, err = timeParallel(ctx, *dir, *count, *parallel, pre); err != nil {
			return err
		}
		p50, p99 = percentiles(lat)
		fmt.Fprintf(stdout, "disk: %s, %d files at once: p50 %.3f ms, p99 %.3f ms (%d writes); "+
			"the floor with %d nodes on this one disk (two commits): %.3f ms\n",
			what, *parallel, ms(p50), ms(p99), len(lat), *parallel, 2*ms(p50))
	}
	return nil
}

// percentiles sorts lat and returns its p50 and p99.
func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}

// timeParallel runs timeAppends on n files at once, one goroutine each,
// and returns every append's latency.
func timeParallel(ctx context.Context, dir string, count, n int, prealloc bool) ([]time.Duration, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		all   []time.Duration
		first error
	)
	for range n {
		wg.Go(func() {
			lat, err := timeAppends(ctx, dir, count, prealloc)
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
// followed by fdatasync, and returns each append's latency. With
// prealloc the file is first filled with zeros for all of them and
// synced, and the blocks overwrite the zeros.
func timeAppends(ctx context.Context, dir string, count int, prealloc bool) ([]time.Duration, error) {
	f, err := os.CreateTemp(dir, "latchd-bench-disk-*")
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	if prealloc {
		if _, err := f.Write(make([]byte, count*len(block))); err != nil {
			return nil, fmt.Errorf("disk: %w", err)
		}
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("disk: %w", err)
		}
	}
	lat := make([]time.Duration, 0, count)
	for i := 0; i < count && ctx.Err() == nil; i++ {
		start := time.Now()
		if _, err := f.WriteAt(block, int64(i*len(block))); err != nil {
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
