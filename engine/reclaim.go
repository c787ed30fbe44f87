package engine

// Reclaim hands what owner from has on key to owner to, for a client that
// comes back on a new connection with a request it already made (a retry
// carrying the same request id, replayed by a replicated state machine).
// It takes from's first entry on key:
//
//   - held and live: the entry moves to to, its lease restarts at now plus
//     its TTL (as a renewal restarts it), and Reclaim returns Granted with
//     the entry's token: the grant the first request got;
//   - waiting: the entry moves to to and keeps its place in the queue; a
//     parked one (not an uncollected two-phase enqueue) takes sink, and
//     the Sink it had hears Canceled. Reclaim returns Queued.
//
// It reports false when from has nothing on key (a lease found past its
// deadline is expired on the spot, as Release does). from may equal to.
func (e *Engine) Reclaim(now int64, key []byte, from, to OwnerID, sink Sink) (Outcome, bool) {
	if len(key) == 0 || from == 0 || to == 0 {
		return Outcome{}, false
	}
	out, ok := e.shardFor(key).reclaim(now, key, from, to, sink)
	e.settleSets(now, nil)
	return out, ok
}

func (s *shard) reclaim(now int64, key []byte, from, to OwnerID, sink Sink) (Outcome, bool) {
	var d *[]delivery
	s.lockW()
	var en *entry
	if res := s.res[string(key)]; res != nil {
		en = s.findOwned(from, res, false)
		if en != nil && en.set != nil {
			en = nil // a waiting set moves as one, never by a single key's retry
		}
		if en != nil && en.holding && en.deadline <= now {
			s.noteLapsedLocked(en)
			s.lostLocked(now, en, EventExpired)
			s.removeLocked(en)
			s.ctr.Expiries++
			d = s.promoteLocked(now, res, d)
			en = nil
		}
	}
	var (
		out Outcome
		old Sink
	)
	if en != nil {
		if to != from {
			s.unlinkOwner(en)
			s.e.own.done(from)
			en.owner = to
			s.e.own.add(to)
			s.linkOwner(en)
		}
		if en.holding {
			s.heap.set(en, now+int64(en.ttl))
			out = Outcome{Result: Granted, Token: en.token, TTL: en.ttl}
		} else {
			out = Outcome{Result: Queued}
			if !en.twoPhase {
				old, en.sink = en.sink, sink
			}
		}
	}
	s.updateNextLocked()
	s.mu.Unlock()
	deliver(d, nil)
	if old != nil && old != sink {
		old.Deliver(Outcome{Result: Canceled})
	}
	return out, en != nil
}
