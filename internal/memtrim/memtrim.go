// Package memtrim gives memory the Go runtime keeps but no longer uses back
// to the operating system, after a burst (a flood of large answers to
// clients that never read them, say) has passed. The runtime's own
// scavenger does this too, but slowly, so a process's RSS could stay at
// its peak for minutes after the heap shrank.
package memtrim

import (
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Run calls debug.FreeOSMemory (a full collection, then every free page
// back to the OS) at most once per interval, when either
//
//   - the heap holds more than minIdle bytes free but not returned, and
//     more than it has in use, or
//   - gauge (bytes the program holds in large buffers, e.g. the output
//     budget's count; nil for none) fell by more than minIdle from its
//     highest value since the last trim: that memory is garbage now, but
//     an idle process may not collect it for minutes.
//
// It returns when stop is closed.
func Run(stop <-chan struct{}, every time.Duration, minIdle uint64, gauge func() int64) {
	t := time.NewTicker(every)
	defer t.Stop()
	var peak int64
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		dropped := false
		if gauge != nil {
			g := gauge()
			peak = max(peak, g)
			dropped = uint64(peak-g) > minIdle
		}
		if idle, inUse := heap(); dropped || (idle > minIdle && idle > inUse) {
			debug.FreeOSMemory()
			if gauge != nil {
				peak = gauge()
			}
		}
	}
}

var names = []string{
	"/memory/classes/heap/free:bytes",    // free, not yet returned to the OS
	"/memory/classes/heap/objects:bytes", // live and unswept objects
	"/memory/classes/heap/unused:bytes",  // reserved for objects, unused
}

// heap returns the idle heap bytes still held from the OS and the bytes in
// use by objects.
func heap() (idle, inUse uint64) {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	for i := range s {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0, 0
		}
	}
	return s[0].Value.Uint64(), s[1].Value.Uint64() + s[2].Value.Uint64()
}
