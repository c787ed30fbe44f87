package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// PlainResult is what the plain client measures: ops and wall time only.
type PlainResult struct {
	Workers    int
	Ops        int64
	Elapsed    time.Duration
	Throughput float64
}

// Plain is the plainest client of the protocol, the reference for the
// harness's self-check: a goroutine per worker, each with its own
// connection, doing rounds blocking lock and release round trips. It
// records no latencies.
func Plain(ctx context.Context, addr string, workers, rounds int) (PlainResult, error) {
	if workers <= 0 || rounds <= 0 {
		return PlainResult{}, errors.New("bench: plain needs workers and rounds > 0")
	}
	conns := make([]net.Conn, workers)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	var nd net.Dialer
	for i := range conns {
		c, err := nd.DialContext(ctx, "tcp", addr)
		if err != nil {
			return PlainResult{}, err
		}
		conns[i] = c
	}
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			_ = c.SetDeadline(timePast)
		}
	})
	defer stop()

	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range conns {
		wg.Go(func() { errs[i] = plainWorker(c, "plain-"+strconv.Itoa(i), rounds) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return PlainResult{}, err
	}
	ops := int64(workers) * int64(rounds)
	return PlainResult{
		Workers: workers, Ops: ops, Elapsed: elapsed,
		Throughput: float64(ops) / elapsed.Seconds(),
	}, nil
}

func plainWorker(c net.Conn, key string, rounds int) error {
	r := bufio.NewReader(c)
	for range rounds {
		if _, err := io.WriteString(c, "l\n"+key+"\n10\n"); err != nil {
			return err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "ok" {
			return fmt.Errorf("plain: acquire answered %q", line)
		}
		if _, err := io.WriteString(c, "r\n"+key+"\n"+f[1]+"\n"); err != nil {
			return err
		}
		if line, err = r.ReadString('\n'); err != nil {
			return err
		}
		if strings.TrimSpace(line) != "ok" {
			return fmt.Errorf("plain: release answered %q", line)
		}
	}
	return nil
}

// SelfCheckRow is one worker count of a self-check: the best of the
// repeats of each client.
type SelfCheckRow struct {
	Workers int
	Plain   float64 // ops/s
	Harness float64 // ops/s
	Ratio   float64 // Harness / Plain
}

// SelfCheck runs the plain client and the harness (ModeLock, closed loop)
// against the server at addr, alternating, repeat times at each worker
// count, keeping each one's best throughput. A Ratio of about 1 or more
// everywhere means the harness is not the bottleneck.
func SelfCheck(ctx context.Context, addr string, workers []int, rounds, repeat int) ([]SelfCheckRow, error) {
	repeat = max(repeat, 1)
	cfg := DefaultConfig()
	cfg.Targets = []Target{{Name: "harness", Kind: KindTCP, Addr: addr}}
	cfg.Workers = workers
	cfg.Rounds = rounds
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var rows []SelfCheckRow
	for _, w := range workers {
		row := SelfCheckRow{Workers: w}
		for i := range repeat {
			// Alternate who goes first, so neither always runs warm.
			for j := range 2 {
				if (i+j)%2 == 0 {
					p, err := Plain(ctx, addr, w, rounds)
					if err != nil {
						return rows, err
					}
					row.Plain = max(row.Plain, p.Throughput)
				} else {
					r, err := Run(ctx, cfg, cfg.Targets[0], w, nil)
					if err != nil {
						return rows, err
					}
					if r.Errors > 0 {
						return rows, fmt.Errorf("bench: self-check: %d refused ops", r.Errors)
					}
					row.Harness = max(row.Harness, r.Throughput)
				}
			}
		}
		row.Ratio = row.Harness / row.Plain
		rows = append(rows, row)
	}
	return rows, nil
}

// WriteSelfCheck writes the self-check rows as a Markdown table.
func WriteSelfCheck(w io.Writer, rows []SelfCheckRow) error {
	var b []byte
	b = appendRow(b, []string{"Workers", "Plain", "Harness", "Harness/Plain"})
	b = appendSep(b, 4)
	for _, r := range rows {
		b = appendRow(b, []string{
			FormatCount(int64(r.Workers)), FormatRate(r.Plain), FormatRate(r.Harness), FormatRatio(r.Ratio),
		})
	}
	_, err := w.Write(b)
	return err
}
