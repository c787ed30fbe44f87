package engine

import "math"

// ShiftDeadlines moves every time the engine keeps by delta nanoseconds:
// lease and wait deadlines, idle-key times, session last-seen times and
// the next-deadline marks. Relative order is unchanged, so the heaps and
// lists stay valid. Times saturate instead of wrapping; "never" stays
// never.
//
// A new Raft leader uses it so that each lease keeps, measured from the
// new leader's clock, the time it had left at the last applied command:
// delta = newLeaderNow - lastAppliedNow (see replica's Restamp). Like every
// mutating call it must be applied alike on every replica.
func (e *Engine) ShiftDeadlines(delta int64) {
	if delta == 0 {
		return
	}
	for i := range e.shards {
		s := &e.shards[i]
		s.lockW()
		for _, en := range s.heap {
			en.deadline = addSat(en.deadline, delta)
		}
		for r := s.idle.head; r != nil; r = r.inext {
			r.idleAt = addSat(r.idleAt, delta)
		}
		if n := s.next.Load(); n != math.MaxInt64 {
			s.next.Store(addSat(n, delta))
		}
		s.mu.Unlock()
	}
	ss := &e.sess
	ss.mu.Lock()
	for _, s := range ss.m {
		s.lastSeen = addSat(s.lastSeen, delta)
	}
	// Saturation can turn two deadlines into one, and ties go by owner:
	// file the sessions anew (a rare call, like the loops above).
	ss.rebuildLocked()
	ss.mu.Unlock()
}

// addSat returns t+delta, saturated at the int64 range.
func addSat(t, delta int64) int64 {
	s := t + delta
	switch {
	case delta > 0 && s < t:
		return math.MaxInt64
	case delta < 0 && s > t:
		return math.MinInt64
	}
	return s
}
