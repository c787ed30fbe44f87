package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// diskMain measures the disk's own floor for a replicated op: appending
// 4 KiB to a file and fdatasyncing it, as a raft log append does. A
// cluster acquire+release commits two entries, so twice the p50 is the
// least a one-worker op can take on this disk.
func diskMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("latchd-bench disk", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", os.TempDir(), "directory on the disk to measure")
	count := fs.Int("count", 500, "appends to time")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if *count <= 0 {
		return fmt.Errorf("disk: --count must be > 0")
	}
	lat, err := timeAppends(ctx, *dir, *count)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	fmt.Fprintf(stdout, "disk: 4 KiB append+fdatasync in %s: p50 %.3f ms, p99 %.3f ms (%d appends); "+
		"a one-worker cluster op's floor (two commits): %.3f ms\n",
		*dir, ms(p50), ms(p99), len(lat), 2*ms(p50))
	return nil
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
