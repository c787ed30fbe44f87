package engine

import "math"

// ShiftDeadlines moves every time the engine keeps by delta nanoseconds
// (deadlines, idle-key times, session last-seen times), saturating
// instead of wrapping ("never" stays never); relative order is unchanged,
// so the heaps and lists stay valid. A new Raft leader uses it so that
// each lease keeps, on its clock, the time it had left at the last
// applied command (replica's Restamp). Like every mutating call it must
// be applied alike on every replica.
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
		s.shiftDelaysLocked(delta)
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
	// Saturation can merge two deadlines, and ties go by owner: refile.
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
