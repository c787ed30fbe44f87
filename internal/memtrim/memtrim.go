// Package memtrim gives memory the Go runtime keeps but no longer uses back
// to the operating system, after a burst (a flood of large answers to
// clients that never read them, say) has passed. The runtime collects
// only when the program allocates, and returns freed pages only slowly, so
// without this a process that goes quiet after a burst keeps its peak RSS
// for minutes.
package memtrim

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Run checks every interval and trims (runtime.GC, then
// debug.FreeOSMemory: a full collection and every free page back to the
// OS) at most once per interval, when
//
//   - the heap holds more than minIdle bytes free but not yet returned,
//     and more than it has in use, or
//   - no collection ran during the last interval while more than minIdle
//     bytes were allocated since the last one: the program went quiet
//     after a burst, and its garbage would wait for the runtime's forced
//     collection (every two minutes), or
//   - gauge (bytes the program holds in large buffers, e.g. the output
//     budget's count; nil for none) fell by more than minIdle from its
//     highest value since the last trim.
//
// A busy program collects on its own, so the second rule never fires
// there. Run returns when stop is closed.
func Run(stop <-chan struct{}, every time.Duration, minIdle uint64, gauge func() int64) {
	t := time.NewTicker(every)
	defer t.Stop()
	var peak int64
	last := read()
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
		m := read()
		quiet := m.cycles == last.cycles && m.objects > m.live+minIdle
		idle := m.free > minIdle && m.free > m.objects
		if dropped || quiet || idle {
			// Two collections: what sync.Pools held (gnet's buffers, say)
			// survives the first one in their victim caches.
			runtime.GC()
			debug.FreeOSMemory()
			if gauge != nil {
				peak = gauge()
			}
			m = read()
		}
		last = m
	}
}

// sample is what Run reads of the runtime.
type sample struct {
	free    uint64 // heap bytes free and not yet returned to the OS
	objects uint64 // heap bytes of objects: live, and garbage not yet swept
	live    uint64 // heap bytes live at the end of the last collection
	cycles  uint64 // collections so far
}

var names = [...]string{
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/objects:bytes",
	"/gc/heap/live:bytes",
	"/gc/cycles/total:gc-cycles",
}

func read() sample {
	var s [len(names)]metrics.Sample
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s[:])
	var v [len(names)]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return sample{free: v[0], objects: v[1], live: v[2], cycles: v[3]}
}
