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

	"github.com/latchd/latchd/internal/clock"
)

// Gauges are what the program tells Run of its large buffers; either
// may be nil.
type Gauges struct {
	// Held returns the bytes held in large buffers now (e.g. the output
	// budget's count).
	Held func() int64
	// Made returns the bytes of large buffers made since the start (a
	// counter that only grows): once sent or dropped, they are garbage.
	Made func() uint64
}

// Run checks every interval and trims (runtime.GC, then
// debug.FreeOSMemory: a full collection and every free page back to the
// OS) at most once per interval, when
//
//   - the heap holds more than minIdle bytes free but not yet returned,
//     and more than it has in use, or
//   - Held fell by more than worth from its highest value since the
//     last trim, or
//   - the last interval was quiet (no collection ran, and it allocated
//     at most minIdle/quietShare bytes) while more than worth bytes
//     were allocated since the last collection, or more than worth
//     bytes of large buffers were Made since the last trim (garbage that
//     would wait for the runtime's forced collection, minutes away), or
//   - the last interval was quiet while the live heap has grown by more
//     than worth since its lowest since the last trim: a burst of small
//     objects that may be garbage now, which the runtime will not collect
//     until the heap doubles.
//
// It waits while Held is falling, for up to settleChecks checks in a row,
// so that a flood torn down over several intervals is trimmed once, at
// its end. worth is max(minIdle, live heap/liveShare): a trim marks the
// whole live heap, twice. Run returns when stop is closed.
func Run(stop <-chan struct{}, every time.Duration, minIdle uint64, g Gauges) {
	run(stop, every, minIdle, g, nil)
}

// rule names the rules of Run that fired at one check, as bits.
type rule uint8

const (
	ruleDropped rule = 1 << iota // Held fell by more than worth
	ruleGarbage                  // quiet, with garbage or churned buffers
	ruleIdle                     // free heap over minIdle and over the objects
	ruleGrown                    // quiet, with the live heap grown since the low
)

// when returns r if b, else 0.
func when(b bool, r rule) rule {
	if b {
		return r
	}
	return 0
}

// run is Run; checked, if not nil, is called after every check with the
// rules that fired (0: no trim), once the trim is done.
func run(stop <-chan struct{}, every time.Duration, minIdle uint64, g Gauges, checked func(rule)) {
	var peak, prev int64 // Held's highest since the last trim, and at the last check
	var falls int        // checks in a row that saw Held fall
	if g.Held == nil {
		g.Held = func() int64 { return 0 }
	}
	if g.Made == nil {
		g.Made = func() uint64 { return 0 }
	}
	made := g.Made()
	last := read()
	low := last.live // lowest live heap seen since the last trim
	clock.Every(stop, every, func() {
		// Read before trimming: what is freed while the trim runs must
		// count for the next one.
		h, mk := g.Held(), g.Made()
		peak = max(peak, h)
		m := read()
		// A trim marks the whole live heap, twice: it must free at least
		// minIdle and a liveShare'th of the live heap to be worth that.
		worth := max(minIdle, m.live/liveShare)
		falling := h < prev
		prev = h
		if falling {
			falls++
		} else {
			falls = 0
		}
		dropped := uint64(peak-h) > worth
		churned := mk-made > worth
		// Quiet: no collection during the interval, and little
		// allocated in it. A program that allocates steadily is
		// collected by the runtime at its heap goal anyway; trimming it
		// would only add full marks.
		quiet := m.cycles == last.cycles && m.allocs-last.allocs <= minIdle/quietShare
		garbage := quiet && (m.objects > m.live+worth || churned)
		idle := m.free > minIdle && m.free > m.objects
		low = min(low, m.live)
		grown := quiet && m.live > low+worth
		fired := when(dropped, ruleDropped) | when(garbage, ruleGarbage) | when(idle, ruleIdle) | when(grown, ruleGrown)
		if falling && falls < settleChecks {
			fired = 0 // the program is still letting go: trim once it is done
		}
		if fired != 0 {
			// Two collections: what sync.Pools held (gnet's buffers, say)
			// survives the first one in their victim caches.
			runtime.GC()
			debug.FreeOSMemory()
			peak, made, falls = h, mk, 0
			m = read()
			low = m.live
		}
		last = m
		if checked != nil {
			checked(fired)
		}
	})
}

// settleChecks: when Held has fallen at this many checks in a row, Run
// trims (if a rule says so) without waiting for the fall to end.
const settleChecks = 5

// quietShare: an interval that allocated at most minIdle/quietShare bytes
// is quiet.
const quietShare = 8

// liveShare: a trim must be able to free at least live/liveShare bytes.
const liveShare = 4

// sample is what Run reads of the runtime.
type sample struct {
	free    uint64 // heap bytes free and not yet returned to the OS
	objects uint64 // heap bytes of objects: live, and garbage not yet swept
	live    uint64 // heap bytes live at the end of the last collection
	cycles  uint64 // collections so far
	allocs  uint64 // heap bytes allocated so far
}

var names = [...]string{
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/objects:bytes",
	"/gc/heap/live:bytes",
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/allocs:bytes",
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
	return sample{free: v[0], objects: v[1], live: v[2], cycles: v[3], allocs: v[4]}
}
