package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds: latencies are recorded in microseconds from 1 µs to
// one minute with three significant figures (0.1% resolution).
const (
	histMin     = 1
	histMax     = int64(time.Minute / time.Microsecond)
	histSigFigs = 3
)

// refusedError is an op the server answered but did not grant, with its
// answer: the worker counts it and goes on. Any other error ends its run.
type refusedError struct{ answer string }

func (e *refusedError) Error() string { return "bench: refused: " + e.answer }

func refused(answer string) error { return &refusedError{answer: answer} }

// driver runs ops over one worker's connection. It is used by one
// goroutine only.
type driver interface {
	// op runs one acquire and one release.
	op() error
	// interrupt unblocks an op in progress; it may run on any goroutine.
	interrupt()
	close() error
}

// Result is one row: one target at one worker count.
type Result struct {
	Target   Target
	Mode     Mode
	Workers  int
	Rounds   int           // ops per worker asked for; 0 in duration mode
	Duration time.Duration // asked for; 0 in rounds mode
	Rate     float64       // open-loop schedule; 0 = closed loop
	Ops      int64         // granted and released
	Errors   int64         // refused ops (not counted in Ops)
	// Refusal is the server's answer to the first refused op ("timeout",
	// "error_not_leader 10.0.0.2:6388", ...), or "".
	Refusal    string
	Elapsed    time.Duration
	Throughput float64 // Ops per second of Elapsed
	Mean       time.Duration
	P50        time.Duration
	P99        time.Duration
	P999       time.Duration
	Max        time.Duration
	// Ratio is the first target's throughput divided by this row's, at
	// the same worker count; 1 on the first target's rows.
	Ratio float64
	// CPU is the CPU time the target's PIDs and latchd-bench used over
	// the row; 0 when the target names no processes.
	CPU time.Duration
}

// worker is one goroutine's state: its connection and its histogram.
type worker struct {
	d      driver
	hist   *hdrhistogram.Histogram
	sum    time.Duration
	ops    int64
	errors int64
	first  string // the server's answer to the first refused op
	err    error
}

func newWorker(d driver) *worker {
	return &worker{d: d, hist: hdrhistogram.New(histMin, histMax, histSigFigs)}
}

// Run drives target with the given number of workers, once, and returns
// the row. Connections are set up before the clock starts; cancelling ctx
// stops the loops and interrupts every connection.
func Run(ctx context.Context, cfg Config, target Target, workers int, progress *atomic.Int64) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	ws := make([]*worker, workers)
	defer func() {
		for _, w := range ws {
			if w != nil {
				_ = w.d.close()
			}
		}
	}()
	dctx := ctx
	if target.Kind == KindMux {
		var done func()
		var err error
		if dctx, done, err = withMux(ctx, cfg, target.Addr); err != nil {
			return Result{}, fmt.Errorf("bench: %s: %w", target.Name, err)
		}
		defer done() // runs before the workers close, which only stop their loops
	}
	if err := dialAll(dctx, cfg, target, ws); err != nil {
		return Result{}, err
	}
	return measure(ctx, cfg, target, ws, progress)
}

// measure runs the workers' loops, joins them and merges their
// histograms into the row.
func measure(ctx context.Context, cfg Config, target Target, ws []*worker, progress *atomic.Int64) (Result, error) {
	workers := len(ws)
	if progress == nil {
		progress = new(atomic.Int64)
	}

	var stop atomic.Bool
	// When the caller gives up, stop the loops and unblock reads.
	defer context.AfterFunc(ctx, func() {
		stop.Store(true)
		for _, w := range ws {
			w.d.interrupt()
		}
	})()

	var wg sync.WaitGroup
	start := time.Now()
	loop := newSchedule(cfg, workers, start)
	for i, w := range ws {
		wg.Go(func() { w.run(loop, i, &stop, progress) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}

	res := Result{
		Target: target, Mode: cfg.Mode, Workers: workers, Rate: cfg.Rate,
		Elapsed: elapsed,
	}
	if cfg.Duration > 0 {
		res.Duration = cfg.Duration
	} else {
		res.Rounds = cfg.Rounds
	}
	merged := hdrhistogram.New(histMin, histMax, histSigFigs)
	var sum time.Duration
	for i, w := range ws {
		if w.err != nil {
			return Result{}, fmt.Errorf("bench: %s worker %d: %w", target.Name, i, w.err)
		}
		merged.Merge(w.hist)
		sum += w.sum
		res.Ops += w.ops
		res.Errors += w.errors
		res.Refusal = cmp.Or(res.Refusal, w.first)
	}
	summarize(&res, merged, sum)
	return res, nil
}

// summarize fills the throughput and latency columns of r.
func summarize(r *Result, h *hdrhistogram.Histogram, sum time.Duration) {
	if r.Elapsed > 0 {
		r.Throughput = float64(r.Ops) / r.Elapsed.Seconds()
	}
	if n := h.TotalCount(); n > 0 {
		r.Mean = sum / time.Duration(n)
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	r.P50 = us(h.ValueAtQuantile(50))
	r.P99 = us(h.ValueAtQuantile(99))
	r.P999 = us(h.ValueAtQuantile(99.9))
	r.Max = us(h.Max())
}

// dialAll connects every worker, a few at a time.
func dialAll(ctx context.Context, cfg Config, target Target, ws []*worker) error {
	const parallel = 16
	sem := make(chan struct{}, parallel)
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i := range ws {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
			defer cancel()
			d, err := dialers[target.Kind](dctx, cfg, target.Addr, i)
			if err != nil {
				errs[i] = fmt.Errorf("bench: %s worker %d: %w", target.Name, i, err)
				return
			}
			ws[i] = newWorker(d)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// dialers connect worker w to addr, by the target's Kind.
var dialers = map[Kind]func(ctx context.Context, cfg Config, addr string, w int) (driver, error){
	KindTCP:   dialTCP,
	KindHTTP:  dialHTTP,
	KindRedis: dialRedis,
	KindEtcd:  dialEtcd,
	KindMux:   dialMux,
}

// schedule says when a row ends and, in open loop, when each op starts.
type schedule struct {
	start    time.Time
	deadline time.Time     // zero in rounds mode
	interval time.Duration // per worker; 0 = closed loop
	rounds   int
	workers  int
}

func newSchedule(cfg Config, workers int, start time.Time) schedule {
	s := schedule{start: start, rounds: cfg.Rounds, workers: workers}
	if cfg.Duration > 0 {
		s.deadline = start.Add(cfg.Duration)
		s.rounds = 0
	}
	if cfg.Rate > 0 {
		s.interval = max(time.Duration(float64(workers)/cfg.Rate*float64(time.Second)), 1)
	}
	return s
}

// progressEvery is how many ops a worker runs between progress updates.
const progressEvery = 64

// run is one worker's loop: the hot path.
func (w *worker) run(s schedule, id int, stop *atomic.Bool, progress *atomic.Int64) {
	open := s.interval > 0
	var next time.Time
	if open { // stagger the workers over one interval
		next = s.start.Add(s.interval * time.Duration(id) / time.Duration(s.workers))
	}
	pending := 0
	// In the closed loop an op begins when the last one ended: one clock
	// read per op.
	end := time.Now()
	for i := 0; s.rounds == 0 || i < s.rounds; i++ {
		if stop.Load() {
			break
		}
		var begin time.Time
		if open {
			if !s.deadline.IsZero() && !next.Before(s.deadline) {
				break
			}
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			begin = next
			next = next.Add(s.interval)
		} else {
			begin = end
		}
		err := w.d.op()
		end = time.Now()
		var re *refusedError
		switch {
		case err == nil:
			lat := end.Sub(begin)
			w.sum += lat
			w.ops++
			_ = w.hist.RecordValue(min(int64(lat/time.Microsecond), histMax)) // in range by construction
		case errors.As(err, &re):
			w.errors++
			w.first = cmp.Or(w.first, re.answer)
		default:
			w.err = err
			return
		}
		if pending++; pending == progressEvery {
			progress.Add(progressEvery)
			pending = 0
		}
		if !open && !s.deadline.IsZero() && !end.Before(s.deadline) {
			break
		}
	}
	progress.Add(int64(pending))
	// A pipelining driver still holds its last grant: others may wait
	// for it.
	if f, ok := w.d.(interface{ flush() error }); ok {
		var re *refusedError
		if err := f.flush(); err != nil && !errors.As(err, &re) {
			w.err = err
		}
	}
}
