package memtrim

import (
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
)

var sink [][]byte

// check is what one check of run saw and did: the rules that fired (0:
// no trim), and what Held returned to it.
type check struct {
	fired rule
	held  int64
}

// startRun runs run until the test ends and returns its checks, in order.
func startRun(t *testing.T, every time.Duration, minIdle uint64, g Gauges) <-chan check {
	t.Helper()
	checks := make(chan check, 1000)
	stop := make(chan struct{})
	done := make(chan struct{})
	var held int64 // written and read by run's goroutine only
	if h := g.Held; h != nil {
		g.Held = func() int64 { held = h(); return held }
	}
	go func() {
		defer close(done)
		run(stop, every, minIdle, g, func(r rule) {
			select {
			case checks <- check{r, held}:
			case <-stop:
			}
		})
	}()
	t.Cleanup(func() { close(stop); <-done })
	return checks
}

// waitCheck reads checks until one satisfies ok and returns it, failing
// the test if none does within 10 s.
func waitCheck(t *testing.T, checks <-chan check, what string, ok func(check) bool) check {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case c := <-checks:
			if ok(c) {
				return c
			}
		case <-deadline.C:
			t.Fatalf("no check %s within 10 s", what)
		}
	}
}

// trimmedBy reports whether a check trimmed for one of the rules in r.
func trimmedBy(r rule) func(check) bool {
	return func(c check) bool { return c.fired&r != 0 }
}

// TestRunReturnsFreedHeap frees 64 MiB and checks that Run trims for the
// idle heap, giving it back to the OS.
func TestRunReturnsFreedHeap(t *testing.T) {
	for range 64 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
	runtime.GC()
	if idle := read().free; idle < 32<<20 {
		t.Skipf("only %d MiB free after GC: the runtime returned it already", idle>>20)
	}
	checks := startRun(t, 10*time.Millisecond, 8<<20, Gauges{})
	waitCheck(t, checks, "trimming the free heap", trimmedBy(ruleIdle))
	if idle := read().free; idle >= 8<<20 {
		t.Fatalf("%d MiB of free heap still held after the trim", idle>>20)
	}
}

// TestRunTrimsAfterGaugeDrop: once the gauge has fallen by 64 MiB (and
// stopped falling), a check trims, though no collection has run since.
func TestRunTrimsAfterGaugeDrop(t *testing.T) {
	var held atomic.Int64
	held.Store(64 << 20)
	checks := startRun(t, 10*time.Millisecond, 8<<20, Gauges{Held: held.Load})
	waitCheck(t, checks, "seeing the peak", func(c check) bool { return c.held == 64<<20 })
	held.Store(0)
	if c := waitCheck(t, checks, "trimming for the drop", trimmedBy(ruleDropped)); c.held != 0 {
		t.Fatalf("trimmed for the drop with the gauge at %d MiB, before it fell", c.held>>20)
	}
}

// TestRunTrimsOnceAFallIsOver: a flood of small objects, live at the last
// collection, goes over two checks while the gauge falls with it, the
// second part less than worth (waiters whose connections the server
// closes over more than an interval). No rule trims until the fall is
// over: a trim midway would collect only the first part and leave the
// rest to the runtime.
func TestRunTrimsOnceAFallIsOver(t *testing.T) {
	debug.FreeOSMemory() // no garbage nor free heap before the flood
	// Held runs on run's goroutine, once a check, before run reads the
	// runtime: it makes the flood and lets it go, one step a check.
	var calls atomic.Int64
	var flood *node // used by run's goroutine only
	held := func() int64 {
		switch calls.Add(1) {
		case 1: // the baseline
			return 0
		case 2: // the flood: ~33 MiB, live at a collection
			for range 300_000 {
				flood = &node{next: flood}
			}
			runtime.GC()
			return 20 << 20
		case 3: // most of it goes
			n := flood
			for range 50_000 {
				n = n.next
			}
			n.next = nil
			return 4 << 20
		default: // the rest goes
			flood = nil
			return 0
		}
	}
	checks := startRun(t, 20*time.Millisecond, 8<<20, Gauges{Held: held})
	for c := range checks {
		if c.fired != 0 && calls.Load() > 2 {
			if c.held != 0 {
				t.Fatalf("trimmed (%04b) midway through the fall, with the gauge at %d MiB", c.fired, c.held>>20)
			}
			if live := read().live; live > 4<<20 {
				t.Fatalf("%d MiB live after the trim", live>>20)
			}
			return
		}
		if calls.Load() > 100 {
			t.Fatalf("no trim in %d checks after the flood went", calls.Load())
		}
	}
}

// TestRunTrimsAFallThatGoesOn: a gauge that keeps falling is trimmed for
// its drop all the same, without waiting for the fall to end.
func TestRunTrimsAFallThatGoesOn(t *testing.T) {
	var calls atomic.Int64
	held := func() int64 { return 1<<40 - (calls.Add(1)-1)<<20 } // 1 MiB less every check
	checks := startRun(t, 10*time.Millisecond, 8<<20, Gauges{Held: held})
	n := 0
	for c := range checks {
		n++
		if c.fired&ruleDropped != 0 {
			return
		}
		if n > 100 {
			t.Fatalf("no trim in %d checks of a gauge falling 1 MiB a check", n)
		}
	}
}

// TestRunCollectsAfterQuietBurst: garbage left by a burst, with no
// collection since, is collected and returned.
func TestRunCollectsAfterQuietBurst(t *testing.T) {
	runtime.GC()
	// Run watches from before the burst, as in latchd (it starts with
	// the process): a collection the burst itself triggers sees the
	// buffers live, and only a baseline taken before tells that apart.
	checks := startRun(t, 20*time.Millisecond, 8<<20, Gauges{})
	for range 3 { // a few quiet intervals: the baseline
		waitCheck(t, checks, "before the burst", func(check) bool { return true })
	}
	for range 32 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil // 32 MiB of garbage, live at any collection during the burst
	waitCheck(t, checks, "collecting the burst", trimmedBy(ruleGarbage|ruleGrown))
	if objects := read().objects; objects > 16<<20 {
		t.Fatalf("%d MiB in objects after the trim", objects>>20)
	}
}

// TestRunTrimsAfterChurn: large buffers made since the last trim, then a
// quiet interval, trigger a trim even when the last collection saw them
// live.
func TestRunTrimsAfterChurn(t *testing.T) {
	var made atomic.Uint64
	checks := startRun(t, 10*time.Millisecond, 8<<20, Gauges{Made: made.Load})
	// Run has read its baseline of Made before its first check.
	waitCheck(t, checks, "before the buffers", func(check) bool { return true })
	made.Add(64 << 20)
	waitCheck(t, checks, "after 64 MiB of buffers were made", trimmedBy(ruleGarbage))
}

// node is a small object with a pointer, as an engine entry is.
type node struct {
	next *node
	pad  [12]uint64
}

var chain *node

// TestRunCollectsGarbageLiveAtLastCollection: many small objects, live at
// the last collection, become garbage while the program is quiet (a
// million queued waiters whose connections all closed). Nothing else
// allocates, so the runtime would keep them until its forced collection
// two minutes later; Run must collect them.
func TestRunCollectsGarbageLiveAtLastCollection(t *testing.T) {
	runtime.GC()
	// Held reports when each check begins (a rising count, so no rule of
	// its own fires), so that a trim that began before the chain became
	// garbage (the test's goroutine stalled between the collection and
	// dropping the chain) is told apart and the scenario run again,
	// rather than read as a trim that freed nothing.
	checks := startRun(t, 50*time.Millisecond, 8<<20, Gauges{Held: func() int64 {
		return time.Now().UnixNano()
	}})
	for try := 0; ; try++ {
		for range 300_000 { // ~33 MiB
			chain = &node{next: chain}
		}
		runtime.GC() // the chain is live at this collection...
		chain = nil  // ...and garbage right after it
		dropped := time.Now().UnixNano()
		c := waitCheck(t, checks, "collecting the grown live heap", trimmedBy(ruleGrown))
		if c.held < dropped && try < 5 {
			continue // the trim began while the chain was still live
		}
		if live := read().live; live > 16<<20 {
			t.Fatalf("%d MiB live after the trim", live>>20)
		}
		return
	}
}

// TestRunLeavesABusyLargeHeapToTheRuntime: a large live heap and a
// steady stream of allocation, with minIdle of garbage gathering between
// the runtime's own collections. Trimming there forces a full mark of
// the live heap every few intervals; the runtime collects on its own when
// the heap reaches its goal. The intervals are long against the steps of
// allocation, so a stall of the test's goroutine on a loaded machine does
// not make one look quiet; a couple of trims are still allowed for that
// (the old rule trimmed about ten times).
func TestRunLeavesABusyLargeHeapToTheRuntime(t *testing.T) {
	for range 400_000 { // ~44 MiB live, all pointers to mark
		chain = &node{next: chain}
	}
	defer func() { chain = nil }()
	runtime.GC()
	checks := startRun(t, 50*time.Millisecond, 1<<20, Gauges{})
	// 128 KiB every 2 ms for a second: about 3 MiB an interval, 64 MiB
	// in all, so a collection of the runtime's own or two. The sleep
	// paces the allocation; it synchronises nothing.
	var keep [][]byte
	for range 500 {
		keep = append(keep, make([]byte, 128<<10))
		if len(keep) > 32 {
			keep = keep[:0]
		}
		time.Sleep(2 * time.Millisecond)
	}
	n, trims := 0, 0
	for len(checks) > 0 {
		if (<-checks).fired != 0 {
			trims++
		}
		n++
	}
	if n < 10 {
		t.Fatalf("only %d checks while the program allocated for over a second", n)
	}
	if trims > 2 {
		t.Fatalf("%d trims in %d checks while the program allocated about 3 MiB an interval", trims, n)
	}
}

// TestRunWeighsATrimAgainstTheLiveHeap: with 44 MiB live, a gauge drop of
// 9 MiB (past minIdle, short of a quarter of the live heap) is not worth
// two full marks of the heap; a drop of 64 MiB is.
func TestRunWeighsATrimAgainstTheLiveHeap(t *testing.T) {
	for range 400_000 { // ~44 MiB live
		chain = &node{next: chain}
	}
	defer func() { chain = nil }()
	runtime.GC()
	var held atomic.Int64
	held.Store(9 << 20)
	checks := startRun(t, 10*time.Millisecond, 8<<20, Gauges{Held: held.Load})
	waitCheck(t, checks, "seeing the 9 MiB peak", func(c check) bool { return c.held == 9<<20 })
	held.Store(0)
	for range 10 {
		c := waitCheck(t, checks, "seeing the 9 MiB drop", func(c check) bool { return c.held == 0 })
		if c.fired&ruleDropped != 0 {
			t.Fatal("a trim for a gauge drop of 9 MiB with 44 MiB live")
		}
	}
	held.Store(64 << 20)
	waitCheck(t, checks, "seeing the 64 MiB peak", func(c check) bool { return c.held == 64<<20 })
	held.Store(0)
	if c := waitCheck(t, checks, "trimming for the 64 MiB drop", trimmedBy(ruleDropped)); c.held != 0 {
		t.Fatalf("trimmed for the drop with the gauge at %d MiB, before it fell", c.held>>20)
	}
}
