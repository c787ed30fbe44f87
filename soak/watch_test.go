package soak

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
)

// Watcher polls an engine's Snapshot and Metrics while a run goes on and
// checks what the server itself says: no semaphore over its limit, no
// lock lease left running long past its deadline (expiry is prompt).
type Watcher struct {
	eng      *engine.Engine
	overdue  time.Duration
	stop     chan struct{}
	done     chan struct{}
	polls    atomic.Int64
	mu       sync.Mutex
	viol     []Violation
	peakHeld int
	peakWait int
	peakKeys int
}

// Watch polls eng every 10 ms until Stop. A lease still held overdue past
// its deadline is a violation.
func Watch(eng *engine.Engine, overdue time.Duration) *Watcher {
	w := &Watcher{eng: eng, overdue: overdue, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *Watcher) run() {
	defer close(w.done)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.poll()
	}
}

func (w *Watcher) poll() {
	w.polls.Add(1)
	st := w.eng.Snapshot(clock.Now())
	_, g := w.eng.Metrics()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peakHeld = max(w.peakHeld, g.Held)
	w.peakWait = max(w.peakWait, g.Waiting)
	w.peakKeys = max(w.peakKeys, g.Keys)
	for _, s := range st.Semaphores {
		if s.Holders > s.Limit {
			w.viol = append(w.viol, Violation{"snapshot", fmt.Sprintf("semaphore %q: %d holders, limit %d", s.Key, s.Holders, s.Limit)})
		}
	}
	seen := map[string]bool{}
	for _, l := range st.Locks {
		if seen[l.Key] {
			w.viol = append(w.viol, Violation{"snapshot", fmt.Sprintf("lock %q listed twice", l.Key)})
		}
		seen[l.Key] = true
		if od := -time.Duration(l.LeaseExpiresInS * float64(time.Second)); od > w.overdue {
			w.viol = append(w.viol, Violation{"snapshot", fmt.Sprintf("lock %q held %v past its lease", l.Key, od)})
		}
	}
}

// Stop ends the polling and returns the violations and the number of
// polls.
func (w *Watcher) Stop() (polls int64, v []Violation) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls.Load(), w.viol
}

// Peaks returns the largest Held, Waiting and Keys gauges seen.
func (w *Watcher) Peaks() (held, waiting, keys int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peakHeld, w.peakWait, w.peakKeys
}

// PollUntil calls cond every 2 ms until it holds or timeout passes, and
// reports whether it held.
func PollUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}
