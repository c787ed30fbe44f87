package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/httpfast"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// tinyConfig is a two-row sweep of few rounds against target.
func tinyConfig(mode Mode, targets ...Target) Config {
	cfg := DefaultConfig()
	cfg.Targets = targets
	cfg.Workers = []int{2, 5}
	cfg.Rounds = 20
	cfg.Mode = mode
	cfg.Limit = 2
	cfg.AcquireTimeout = 5 * time.Second
	return cfg
}

// checkRows checks that every row ran workers x rounds ops without a
// refusal and that every column of the table is filled.
func checkRows(t *testing.T, cfg Config, rs []Result) {
	t.Helper()
	if want := len(cfg.Workers) * len(cfg.Targets); len(rs) != want {
		t.Fatalf("%d rows; want %d", len(rs), want)
	}
	for i, r := range rs {
		wantWorkers := cfg.Workers[i/len(cfg.Targets)]
		wantTarget := cfg.Targets[i%len(cfg.Targets)].Name
		if r.Workers != wantWorkers || r.Target.Name != wantTarget {
			t.Errorf("row %d is %s at %d workers; want %s at %d", i, r.Target.Name, r.Workers, wantTarget, wantWorkers)
		}
		if r.Ops != int64(r.Workers*cfg.Rounds) || r.Errors != 0 {
			t.Errorf("row %d: Ops = %d, Errors = %d; want %d x %d ops and no errors", i, r.Ops, r.Errors, r.Workers, cfg.Rounds)
		}
		if r.Throughput <= 0 || r.Mean <= 0 || r.P50 <= 0 || r.P99 < r.P50 || r.P999 < r.P99 || r.Max < r.P999 || r.Ratio <= 0 {
			t.Errorf("row %d has an empty or unordered column: %+v", i, r)
		}
		for j, cell := range Row(r, TableOptions{Compare: true}) {
			if cell == "" || cell == "-" || strings.HasPrefix(cell, "0 ") || cell == "0.000 ms" {
				t.Errorf("row %d cell %d = %q; want a value", i, j, cell)
			}
		}
	}
}

func TestSweepCeiling(t *testing.T) {
	c := startCeiling(t)
	cfg := tinyConfig(ModeLock, Target{Name: "ceiling", Kind: KindTCP, Addr: c.Addr()})
	var progress atomic.Int64
	rs, err := Sweep(context.Background(), cfg, &progress)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, cfg, rs)
	if got, want := progress.Load(), TotalOps(cfg); got != want {
		t.Fatalf("progress counted %d ops; want %d", got, want)
	}
	if got, want := c.Requests(), 2*TotalOps(cfg); got != want {
		t.Fatalf("ceiling answered %d requests; want %d (acquire + release per op)", got, want)
	}
}

func TestSweepServerModes(t *testing.T) {
	srv := servertest.StartServer(t)
	for _, mode := range Modes {
		t.Run(string(mode), func(t *testing.T) {
			cfg := tinyConfig(mode, Target{Name: "latchd", Kind: KindTCP, Addr: srv.Addr})
			cfg.KeyPrefix = "k-" + string(mode)
			rs, err := Sweep(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, cfg, rs)
		})
	}
}

func TestSweepCompare(t *testing.T) {
	srv := servertest.StartServer(t)
	c := startCeiling(t)
	cfg := tinyConfig(ModeLock,
		Target{Name: "latchd", Kind: KindTCP, Addr: srv.Addr},
		Target{Name: "ceiling", Kind: KindTCP, Addr: c.Addr()})
	rs, err := Sweep(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, cfg, rs)
	for i := 0; i < len(rs); i += 2 {
		if rs[i].Ratio != 1 {
			t.Errorf("base row %d: Ratio = %v; want 1", i, rs[i].Ratio)
		}
		if want := rs[i].Throughput / rs[i+1].Throughput; rs[i+1].Ratio != want {
			t.Errorf("row %d: Ratio = %v; want %v", i+1, rs[i+1].Ratio, want)
		}
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rs, TableOptions{Compare: true}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n| ceiling |"); n != 2 {
		t.Fatalf("table has %d ceiling rows; want 2:\n%s", n, b.String())
	}
}

func TestSweepHTTP(t *testing.T) {
	srv := servertest.StartServer(t)
	hcfg := httpfast.DefaultConfig()
	hcfg.Addr = "127.0.0.1:0"
	h, err := httpfast.New(hcfg, backend.NewLocal(srv.Engine), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Stop(ctx); err != nil {
			t.Errorf("httpfast Stop: %v", err)
		}
	})
	for _, mode := range Modes {
		t.Run(string(mode), func(t *testing.T) {
			cfg := tinyConfig(mode, Target{Name: "latchd-http", Kind: KindHTTP, Addr: h.Addr()})
			cfg.KeyPrefix = "h-" + string(mode)
			rs, err := Sweep(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, cfg, rs)
		})
	}
	// Every worker closed its session.
	testutil.Eventually(t, 5*time.Second, func() bool { return h.Sessions() == 0 }, "sessions left open")
}

func TestSweepDurationAndRate(t *testing.T) {
	c := startCeiling(t)
	cfg := tinyConfig(ModeLock, Target{Name: "ceiling", Kind: KindTCP, Addr: c.Addr()})
	cfg.Workers = []int{4}
	cfg.Rounds = 0
	cfg.Duration = 200 * time.Millisecond
	cfg.Rate = 2000
	rs, err := Sweep(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	// 2000 ops/s for 0.2 s schedules 400 ops; a scheduled op always runs.
	if r.Ops < 380 || r.Ops > 404 {
		t.Fatalf("open loop ran %d ops; want about 400", r.Ops)
	}
	if r.Rounds != 0 || r.Duration != cfg.Duration || r.Rate != 2000 {
		t.Fatalf("row = %+v", r)
	}
}

// stallDriver answers at once except for one op, which takes stall: a
// server that stops for a moment.
type stallDriver struct {
	n       int
	stallAt int
	stall   time.Duration
}

func (d *stallDriver) op() error {
	d.n++
	if d.n == d.stallAt {
		time.Sleep(d.stall) // the simulated server stall
	}
	return nil
}
func (d *stallDriver) interrupt()   {}
func (d *stallDriver) close() error { return nil }

// TestOpenLoopSeesStall checks the point of the open loop: ops scheduled
// while the server stalls are charged the time they waited, so the stall
// shows in the tail; the closed loop hides it in one sample.
func TestOpenLoopSeesStall(t *testing.T) {
	const stall = 50 * time.Millisecond
	run := func(rate float64) Result {
		cfg := tinyConfig(ModeLock, Target{Name: "fake", Kind: KindTCP, Addr: "x:1"})
		cfg.Rounds = 200
		cfg.Rate = rate
		w := newWorker(&stallDriver{stallAt: 100, stall: stall})
		r, err := measure(context.Background(), cfg, cfg.Targets[0], []*worker{w}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// 200 ops at 2000/s: the stall delays the 25 ops scheduled during it.
	open := run(2000)
	if open.P99 < stall/4 {
		t.Errorf("open loop p99 = %v; want the stall (%v) in the tail", open.P99, stall)
	}
	closed := run(0)
	if closed.P99 >= stall/4 {
		t.Errorf("closed loop p99 = %v; want it to hide the one stalled op", closed.P99)
	}
	if closed.Max < stall {
		t.Errorf("closed loop max = %v; want >= %v", closed.Max, stall)
	}
}

func TestRunCancel(t *testing.T) {
	c := startCeiling(t)
	cfg := tinyConfig(ModeLock, Target{Name: "ceiling", Kind: KindTCP, Addr: c.Addr()})
	cfg.Rounds, cfg.Duration = 0, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	var progress atomic.Int64
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, cfg, cfg.Targets[0], 3, &progress)
		done <- err
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return progress.Load() > 0 }, "no progress")
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("Run after cancel = %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestRunDialError(t *testing.T) {
	cfg := tinyConfig(ModeLock, Target{Name: "gone", Kind: KindTCP, Addr: "127.0.0.1:1"})
	if _, err := Run(context.Background(), cfg, cfg.Targets[0], 2, nil); err == nil {
		t.Fatal("Run against a closed port succeeded")
	}
}

func TestPlainAndSelfCheck(t *testing.T) {
	c := startCeiling(t)
	p, err := Plain(context.Background(), c.Addr(), 3, 50)
	if err != nil {
		t.Fatal(err)
	}
	if p.Ops != 150 || p.Throughput <= 0 {
		t.Fatalf("Plain = %+v; want 150 ops", p)
	}
	rows, err := SelfCheck(context.Background(), c.Addr(), []int{2}, 50, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Plain <= 0 || rows[0].Harness <= 0 || rows[0].Ratio != rows[0].Harness/rows[0].Plain {
		t.Fatalf("SelfCheck = %+v", rows)
	}
	var b bytes.Buffer
	if err := WriteSelfCheck(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "| Workers | Plain | Harness | Harness/Plain |\n") {
		t.Fatalf("WriteSelfCheck =\n%s", b.String())
	}
}

func TestWritePlot(t *testing.T) {
	var rs []Result
	for i, w := range []int{1, 10, 50} {
		for _, name := range []string{"latchd", "ceiling"} {
			rs = append(rs, Result{Target: Target{Name: name}, Workers: w, Throughput: float64(1000 * (i + 1)), P99: time.Duration(i+1) * time.Millisecond})
		}
	}
	dir := t.TempDir()
	tests := []struct {
		file  string
		magic string
	}{
		{file: "p.svg", magic: "<?xml"},
		{file: "p.png", magic: "\x89PNG"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join(dir, tt.file)
			if err := WritePlotFile(path, rs); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, []byte(tt.magic)) {
				t.Fatalf("%s starts with %q; want %q", tt.file, b[:min(len(b), 8)], tt.magic)
			}
			if tt.file == "p.svg" && !bytes.Contains(b, []byte("ceiling")) {
				t.Fatal("SVG has no legend entry for ceiling")
			}
		})
	}
	if err := WritePlotFile(filepath.Join(dir, "p.gif"), rs); err == nil {
		t.Fatal("WritePlotFile accepted .gif")
	}
}

func TestMainTable(t *testing.T) {
	c := startCeiling(t)
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"--addr", c.Addr(), "--name", "ceiling", "--workers", "1,3", "--rounds", "10", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("Main = %d; stderr: %s", code, errOut.String())
	}
	for _, want := range []string{`"workers": 1`, `"workers": 3`, `"ops": 30`, `"meta"`, `"version"`, `"cores"`, `"mode": "lock"`, `"loop": "closed"`, `"rounds": "10"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("JSON lacks %s:\n%s", want, out.String())
		}
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr not empty (no terminal, so no progress bar): %q", errOut.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"--workers", "0"}, &out, &errOut); code != 2 {
		t.Fatalf("Main with a bad flag = %d; want 2", code)
	}
	if code := Main(context.Background(), []string{"freeport"}, &out, &errOut); code != 0 || !strings.HasSuffix(out.String(), "\n") {
		t.Fatalf("freeport = %d, %q", code, out.String())
	}
	if code := Main(context.Background(), []string{"wait", "--timeout", "5s", c.Addr()}, &out, &errOut); code != 0 {
		t.Fatalf("wait = %d; stderr: %s", code, errOut.String())
	}
}
