package memtrim

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

var sink [][]byte

// TestRunReturnsFreedHeap frees 64 MiB and checks that Run gives the free
// heap back to the OS.
func TestRunReturnsFreedHeap(t *testing.T) {
	for range 64 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
	runtime.GC()
	if idle := read().free; idle < 32<<20 {
		t.Skipf("only %d MiB free after GC: the runtime returned it already", idle>>20)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); Run(stop, 10*time.Millisecond, 8<<20, Gauges{}) }()
	defer func() { close(stop); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		idle := read().free
		if idle < 8<<20 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d MiB of free heap still held after 5 s", idle>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunTrimsAfterGaugeDrop: a drop of the gauge triggers a trim even
// though no collection has run since.
func TestRunTrimsAfterGaugeDrop(t *testing.T) {
	g := int64(64 << 20)
	gauge := make(chan int64, 1)
	gauge <- g
	var last int64
	held := func() int64 {
		select {
		case last = <-gauge:
		default:
		}
		return last
	}
	before := numGC()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); Run(stop, 10*time.Millisecond, 8<<20, Gauges{Held: held}) }()
	defer func() { close(stop); <-done }()
	time.Sleep(50 * time.Millisecond) // the peak is seen
	gauge <- 0
	deadline := time.Now().Add(5 * time.Second)
	for numGC() == before {
		if time.Now().After(deadline) {
			t.Fatal("no collection after the gauge fell by 64 MiB")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func numGC() uint32 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.NumGC
}

// TestRunCollectsAfterQuietBurst: garbage left by a burst, with no
// collection since, is collected and returned.
func TestRunCollectsAfterQuietBurst(t *testing.T) {
	runtime.GC()
	// Run watches from before the burst, as in latchd (it starts with
	// the process): a collection the burst itself triggers sees the
	// buffers live, and only a baseline taken before tells that apart.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); Run(stop, 20*time.Millisecond, 8<<20, Gauges{}) }()
	defer func() { close(stop); <-done }()
	time.Sleep(100 * time.Millisecond) // a few quiet intervals: the baseline
	before := numGC()
	for range 32 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil // 32 MiB of garbage, live at any collection during the burst
	deadline := time.Now().Add(5 * time.Second)
	for numGC() == before || read().objects > 16<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %d collections since the burst, %d MiB in objects", numGC()-before, read().objects>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunTrimsAfterChurn: large buffers made since the last trim, then a
// quiet interval, trigger a trim even when the last collection saw them
// live.
func TestRunTrimsAfterChurn(t *testing.T) {
	var made atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); Run(stop, 10*time.Millisecond, 8<<20, Gauges{Made: made.Load}) }()
	defer func() { close(stop); <-done }()
	time.Sleep(50 * time.Millisecond)
	before := numGC()
	made.Add(64 << 20)
	deadline := time.Now().Add(5 * time.Second)
	for numGC() == before {
		if time.Now().After(deadline) {
			t.Fatal("no collection after 64 MiB of buffers were made")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// node is a small object with a pointer, as an engine entry is.
type node struct {
	next *node
	pad  [12]uint64
}

var chain *node

// TestRunCollectsGarbageLiveAtLastCollection: many small objects, live at
// the last collection, become garbage while the program is quiet (a
// million queued waiters whose connections all closed, #11). Nothing
// else allocates, so the runtime would keep them until its forced
// collection two minutes later; Run must collect them.
func TestRunCollectsGarbageLiveAtLastCollection(t *testing.T) {
	runtime.GC()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); Run(stop, 50*time.Millisecond, 8<<20, Gauges{}) }()
	defer func() { close(stop); <-done }()
	for range 300_000 { // ~33 MiB
		chain = &node{next: chain}
	}
	runtime.GC() // the chain is live at this collection...
	chain = nil  // ...and garbage right after it
	before := numGC()
	deadline := time.Now().Add(5 * time.Second)
	for numGC() == before || read().live > 16<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("%d MiB live at the last collection, no collection since 5 s", read().live>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunLeavesABusyLargeHeapToTheRuntime: a large live heap and a
// steady stream of allocation, with minIdle of garbage gathering between
// the runtime's own collections. Trimming there forces a full mark of
// the live heap every few intervals (two forced collections each time);
// the runtime collects on its own when the heap reaches its goal. The
// intervals are long against the steps of allocation, so a stall of the
// test's goroutine on a loaded machine does not make one look quiet; a
// couple of trims are still allowed for that (the old rule forced about
// twenty).
func TestRunLeavesABusyLargeHeapToTheRuntime(t *testing.T) {
	for range 400_000 { // ~44 MiB live, all pointers to mark
		chain = &node{next: chain}
	}
	defer func() { chain = nil }()
	runtime.GC()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); Run(stop, 50*time.Millisecond, 1<<20, Gauges{}) }()
	defer func() { close(stop); <-done }()
	before := forcedGC()
	// 128 KiB every 2 ms for a second: about 3 MiB an interval, 64 MiB
	// in all, so a collection of the runtime's own or two.
	var keep [][]byte
	for range 500 {
		keep = append(keep, make([]byte, 128<<10))
		if len(keep) > 32 {
			keep = keep[:0]
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n := forcedGC() - before; n > 4 {
		t.Fatalf("%d forced collections while the program allocated about 3 MiB an interval", n)
	}
}

func forcedGC() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
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
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); Run(stop, 10*time.Millisecond, 8<<20, Gauges{Held: held.Load}) }()
	defer func() { close(stop); <-done }()
	time.Sleep(50 * time.Millisecond) // the peak is seen
	before := forcedGC()
	held.Store(0)
	time.Sleep(100 * time.Millisecond) // ten intervals
	if n := forcedGC() - before; n > 0 {
		t.Fatalf("%d forced collections after the gauge fell by 9 MiB with 44 MiB live", n)
	}
	held.Store(64 << 20)
	time.Sleep(50 * time.Millisecond)
	held.Store(0)
	deadline := time.Now().Add(5 * time.Second)
	for forcedGC() == before {
		if time.Now().After(deadline) {
			t.Fatal("no collection after the gauge fell by 64 MiB")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
