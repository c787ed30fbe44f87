package fencefile_test

import (
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/fencefile"
)

// newJournalEngine returns an engine wired to j as cmd/latchd wires it.
func newJournalEngine(tb testing.TB, j *fencefile.Journal) *engine.Engine {
	tb.Helper()
	cfg := engine.DefaultConfig()
	cfg.FenceSeed, cfg.FenceLimit, cfg.FenceReserve = j.EngineHooks()
	e, err := engine.New(cfg)
	if err != nil {
		tb.Fatalf("engine.New: %v", err)
	}
	return e
}

// grant acquires and releases key once and returns the fence it got.
func grant(tb testing.TB, e *engine.Engine, key string) uint64 {
	tb.Helper()
	req := engine.AcquireReq{Key: []byte(key), Owner: 1, Limit: 1, TTL: time.Minute, Salt: 1}
	out, err := e.Acquire(0, req, nil)
	if err != nil || out.Result != engine.Granted {
		tb.Fatalf("Acquire: %v, %v", out, err)
	}
	if err := e.Release(0, req.Key, out.Token); err != nil {
		tb.Fatalf("Release: %v", err)
	}
	return out.Token.Fence
}

// TestEngineNeverOutrunsDisk issues 100 grants with a range of 8, so the
// engine calls FenceReserve about a dozen times, and checks every fence
// against the limit a restart would read from disk.
func TestEngineNeverOutrunsDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.state")
	j := openT(t, path, fencefile.WithRange(8), fencefile.WithClockFloor(1000))
	cfg := engine.DefaultConfig()
	seed, limit, reserve := j.EngineHooks()
	if seed != 1000 || limit != 1008 {
		t.Fatalf("EngineHooks: seed %d, limit %d; want 1000, 1008", seed, limit)
	}
	var calls int
	cfg.FenceSeed, cfg.FenceLimit = seed, limit
	cfg.FenceReserve = func(need uint64) uint64 {
		calls++
		l := reserve(need)
		if d, err := fencefile.DurableLimit(path); err != nil || d < l || l < need {
			t.Errorf("reserve(%d) = %d with %d on disk (%v)", need, l, d, err)
		}
		return l
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	prev := seed
	for i := range 100 {
		f := grant(t, e, "k")
		d, err := fencefile.DurableLimit(path)
		if err != nil || f != prev+1 || f > d {
			t.Fatalf("grant %d: fence %d after %d, durable limit %d (%v)", i, f, prev, d, err)
		}
		prev = f
	}
	// The first 8 come with Open; each call then reserves need+8, 9 new
	// fences: 92 more grants take 11 calls.
	if calls != 11 {
		t.Fatalf("FenceReserve called %d times for 100 grants with range 8, want 11", calls)
	}
}

// TestKeepRaisesAhead drives Keep by hand: no engine-side FenceReserve
// call happens while Keep keeps the limit ahead of the grants.
func TestKeepRaisesAhead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.state")
	j := openT(t, path, fencefile.WithRange(8), fencefile.WithClockFloor(1000))
	tick := make(chan time.Time) // unbuffered: see SetTick
	fencefile.SetTick(j, tick)
	cfg := engine.DefaultConfig()
	var reserve func(uint64) uint64
	var syncCalls atomic.Int64
	cfg.FenceSeed, cfg.FenceLimit, reserve = j.EngineHooks()
	cfg.FenceReserve = func(need uint64) uint64 { syncCalls.Add(1); return reserve(need) }
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 10)
	go func() {
		defer close(done)
		j.Keep(stop, e.LastFence, e.RaiseFenceLimit, func(err error) { errs <- err })
	}()
	check := func() { tick <- time.Time{}; tick <- time.Time{} } // the second send waits for the first check

	check() // limit 1008, last 1000: plenty left, no reservation
	if e.FenceLimit() != 1008 || j.Limit() != 1008 {
		t.Fatalf("Keep reserved with headroom: engine limit %d, journal %d; want 1008", e.FenceLimit(), j.Limit())
	}
	for range 200 {
		if e.FenceLimit()-e.LastFence() < 8/2 {
			check()
		}
		before := e.FenceLimit()
		f := grant(t, e, "k")
		if d, err := fencefile.DurableLimit(path); err != nil || f > d || f > before {
			t.Fatalf("fence %d, engine limit %d, durable %d (%v)", f, before, d, err)
		}
	}
	if n := syncCalls.Load(); n != 0 {
		t.Fatalf("engine called FenceReserve %d times although Keep ran ahead", n)
	}
	if e.LastFence() != 1200 || e.FenceLimit() <= 1200 {
		t.Fatalf("after 200 grants: last %d, limit %d; want 1200, > 1200", e.LastFence(), e.FenceLimit())
	}

	// A failing reservation goes to onErr and Keep carries on.
	for e.FenceLimit()-e.LastFence() >= 8/2 {
		grant(t, e, "k")
	}
	closeT(t, j)
	check()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "closed") {
			t.Fatalf("onErr got %v, want ErrClosed", err)
		}
	default:
		t.Fatal("Keep did not report the failed reservation")
	}
	close(stop)
	<-done
}

func TestEngineHooksPanicWhenNotDurable(t *testing.T) {
	j := openT(t, filepath.Join(t.TempDir(), "fence.state"), fencefile.WithRange(8))
	_, limit, reserve := j.EngineHooks()
	closeT(t, j)
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, "not durable") {
			t.Fatalf("reserve on a closed journal: recovered %v, want a panic saying why", r)
		}
	}()
	l := reserve(limit + 1)
	t.Fatalf("reserve on a closed journal returned %d", l)
}

// BenchmarkAcquireRelease compares an engine seeded from the clock with
// one on a journal (default range, fsync once per 1<<20 grants), with and
// without Keep reserving in the background.
func BenchmarkAcquireRelease(b *testing.B) {
	run := func(b *testing.B, e *engine.Engine) {
		req := engine.AcquireReq{Key: []byte("bench"), Owner: 1, Limit: 1, TTL: time.Minute, Salt: 1}
		b.ReportAllocs()
		for b.Loop() {
			out, err := e.Acquire(0, req, nil)
			if err != nil || out.Result != engine.Granted {
				b.Fatal(out, err)
			}
			if err := e.Release(0, req.Key, out.Token); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("clock", func(b *testing.B) {
		cfg := engine.DefaultConfig()
		cfg.FenceSeed = uint64(time.Now().UnixNano())
		e, err := engine.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		run(b, e)
	})
	b.Run("journal", func(b *testing.B) {
		j, err := fencefile.Open(filepath.Join(b.TempDir(), "fence.state"), fencefile.WithClockFloor(uint64(time.Now().UnixNano())))
		if err != nil {
			b.Fatal(err)
		}
		defer j.Close()
		run(b, newJournalEngine(b, j))
	})
	b.Run("journal+keep", func(b *testing.B) {
		j, err := fencefile.Open(filepath.Join(b.TempDir(), "fence.state"), fencefile.WithClockFloor(uint64(time.Now().UnixNano())))
		if err != nil {
			b.Fatal(err)
		}
		defer j.Close()
		e := newJournalEngine(b, j)
		stop := make(chan struct{})
		defer close(stop)
		go j.Keep(stop, e.LastFence, e.RaiseFenceLimit, func(err error) { b.Error(err) })
		run(b, e)
	})
}

// BenchmarkReserve measures one reservation: a 36-byte pwrite and an
// fsync, the cost Keep pays once per range.
func BenchmarkReserve(b *testing.B) {
	j, err := fencefile.Open(filepath.Join(b.TempDir(), "fence.state"), fencefile.WithRange(1))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := j.Reserve(j.Limit() + 1); err != nil {
			b.Fatal(err)
		}
	}
}
