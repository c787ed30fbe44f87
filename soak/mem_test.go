package soak

import (
	"fmt"
	"runtime"
	"time"
)

// HeapSample is the live heap after garbage collection.
type HeapSample struct {
	HeapAlloc  uint64 // bytes of live objects (and not yet swept garbage: none after GC)
	HeapInuse  uint64
	Goroutines int
}

// Settle runs the garbage collector a few times and samples the heap. The
// smallest of three readings is taken, so a background allocation between
// two collections does not count.
func Settle() HeapSample {
	var best HeapSample
	for i := range 3 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if i == 0 || ms.HeapAlloc < best.HeapAlloc {
			best.HeapAlloc, best.HeapInuse = ms.HeapAlloc, ms.HeapInuse
		}
	}
	best.Goroutines = runtime.NumGoroutine()
	return best
}

// HeapBound is the most the heap may hold after a run that started at
// base: base plus the larger of tol and 10%.
func HeapBound(base HeapSample, tol uint64) uint64 {
	return base.HeapAlloc + max(tol, base.HeapAlloc/10)
}

// SettleTo polls Settle until the heap is within bound or timeout passes
// (finalizers and pools drain over a few cycles); it returns the last
// sample and whether it got there.
func SettleTo(bound uint64, timeout time.Duration) (HeapSample, bool) {
	deadline := time.Now().Add(timeout)
	for {
		s := Settle()
		if s.HeapAlloc <= bound {
			return s, true
		}
		if time.Now().After(deadline) {
			return s, false
		}
		time.Sleep(50 * time.Millisecond) // let background sweepers and pool cleanups run
	}
}

// GoroutinesBack polls until no more goroutines run than base, or timeout
// passes; it returns the last count.
func GoroutinesBack(base int, timeout time.Duration) (int, bool) {
	n := runtime.NumGoroutine()
	ok := PollUntil(timeout, func() bool { n = runtime.NumGoroutine(); return n <= base })
	return n, ok
}

// MiB formats bytes in MiB.
func MiB(b uint64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }
