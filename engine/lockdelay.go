package engine

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"
	"time"
)

// Lock-delay: after a holder loses its slot involuntarily (its lease ran
// out, or its owner went away with DropOwner or a releasing Disconnect),
// the slot is held back for a delay before it is granted again, so that a
// holder still finishing a write cannot meet the next one on a resource
// that checks no fence. A release by token is voluntary: no delay. The
// delay is Config.LockDelay, or the holder's AcquireReq.LockDelay.
//
// A held-back slot counts against the key's limit (resource.reserved)
// until its time is up; waiters keep their places and are granted, in
// order, when it frees. It is engine state: computed from the caller's
// now, shifted by ShiftDeadlines, written by WriteState.

// delayedSlot is one slot of res held back until until.
type delayedSlot struct {
	res   *resource
	until int64
}

// delayList is a shard's held-back slots, in the order they were held
// back, and the earliest time one frees.
type delayList struct {
	slots []delayedSlot
	next  int64 // valid while slots is not empty
}

// lockDelayOf returns the delay en's holder asked for, or the engine's.
func (s *shard) lockDelayOf(en *entry) time.Duration {
	switch {
	case en.delay > 0:
		return en.delay
	case en.delay < 0:
		return 0
	}
	return s.e.cfg.LockDelay
}

// lostLocked is called once where a holder's involuntary loss of en is
// decided (k: EventExpired or EventDropped), before en is removed: it
// holds the slot back for the delay and tells the watchers.
func (s *shard) lostLocked(now int64, en *entry, k EventKind) {
	if !en.holding {
		return
	}
	if d := s.lockDelayOf(en); d > 0 {
		s.holdBackLocked(en.res, addSat(now, int64(d)))
		s.ctr.Delays++
	}
	s.note(k, en.res, en)
}

// holdBackLocked holds one slot of r back until until.
func (s *shard) holdBackLocked(r *resource, until int64) {
	r.reserved++
	if len(s.delays.slots) == 0 || until < s.delays.next {
		s.delays.next = until
	}
	s.delays.slots = append(s.delays.slots, delayedSlot{res: r, until: until})
}

// expireDelaysLocked frees the held-back slots whose time is up and
// grants them to their keys' waiters in order.
func (s *shard) expireDelaysLocked(now int64, d *[]delivery) *[]delivery {
	if len(s.delays.slots) == 0 || s.delays.next > now {
		return d
	}
	next := int64(math.MaxInt64)
	kept := s.delays.slots[:0]
	for _, ds := range s.delays.slots {
		if ds.until > now {
			kept = append(kept, ds)
			next = min(next, ds.until)
			continue
		}
		ds.res.reserved--
		s.note(EventDelayEnded, ds.res, nil)
		d = s.promoteLocked(now, ds.res, d)
	}
	clear(s.delays.slots[len(kept):])
	s.delays.slots, s.delays.next = kept, next
	if len(kept) == 0 && cap(kept) > shrinkFloor {
		s.delays.slots = nil
	}
	return d
}

// nextDelayLocked folds the earliest held-back slot's end into next.
func (s *shard) nextDelayLocked(next int64) int64 {
	if len(s.delays.slots) > 0 && s.delays.next < next {
		return s.delays.next
	}
	return next
}

// shiftDelaysLocked moves every held-back slot's end by delta.
func (s *shard) shiftDelaysLocked(delta int64) {
	for i := range s.delays.slots {
		s.delays.slots[i].until = addSat(s.delays.slots[i].until, delta)
	}
	s.delays.next = addSat(s.delays.next, delta)
}

// DelayedSlots returns how many slots are held back by a lock-delay now.
func (e *Engine) DelayedSlots() int {
	n := 0
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		n += len(s.delays.slots)
		s.mu.Unlock()
	}
	return n
}

// appendDelaysLocked encodes s's lock-delay state for WriteState (state
// version 4), naming resources and entries by the sidx appendStateLocked
// just gave them: the held-back slots in order, then the entries whose
// holder chose its own delay. It returns nil when there is none.
func (s *shard) appendDelaysLocked() []byte {
	var ents []*entry
	for _, r := range s.res {
		for _, q := range [...]*queue{&r.holders, &r.waiters} {
			for en := q.head; en != nil; en = en.qnext {
				if en.delay != 0 {
					ents = append(ents, en)
				}
			}
		}
	}
	if len(s.delays.slots) == 0 && len(ents) == 0 {
		return nil
	}
	b := binary.AppendUvarint(nil, uint64(len(s.delays.slots)))
	for _, ds := range s.delays.slots {
		b = binary.AppendUvarint(b, uint64(ds.res.sidx))
		b = binary.AppendVarint(b, ds.until)
	}
	b = binary.AppendUvarint(b, uint64(len(ents)))
	// Entries in sidx order: the order appendStateLocked numbered them.
	slices.SortFunc(ents, func(a, b *entry) int { return cmp.Compare(a.sidx, b.sidx) })
	for _, en := range ents {
		b = binary.AppendUvarint(b, uint64(en.sidx))
		b = binary.AppendVarint(b, int64(en.delay))
	}
	return b
}

// appendDelays writes the shards' lock-delay sections (state version 4):
// how many shards have one, then each as its index and its bytes.
func appendDelays(b []byte, parts [][]byte) []byte {
	n := 0
	for _, p := range parts {
		if p != nil {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for i, p := range parts {
		if p != nil {
			b = binary.AppendUvarint(b, uint64(i))
			b = append(b, p...)
		}
	}
	return b
}

// readDelays reads what appendDelays wrote into the shards, whose
// resources and entries rss lists in the order they were read.
func (e *Engine) readDelays(d *stateReader, rss []restoring) {
	last := -1
	for range d.count() {
		i := d.index(len(e.shards))
		if d.err != nil {
			return
		}
		if i <= last {
			d.fail("lock-delay sections out of order")
			return
		}
		last = i
		s := &e.shards[i]
		s.mu.Lock()
		s.readDelaysLocked(d, &rss[i])
		s.mu.Unlock()
	}
	for i := range e.shards {
		s := &e.shards[i]
		for _, r := range rss[i].res {
			headSet := r.waiters.head != nil && r.waiters.head.set != nil
			if !(r.consistentDelayed() || headSet) || r.idle != r.empty() {
				d.fail("resource %q breaks its invariants", r.key)
				return
			}
		}
		s.mu.Lock()
		s.updateNextLocked()
		s.mu.Unlock()
	}
}

// consistentDelayed is consistent for a restored key that a lock-delay
// may hold back: its held-back slots count as held, and a read-write key
// held back may have any queue.
func (r *resource) consistentDelayed() bool {
	if r.reserved == 0 {
		return r.consistent()
	}
	if r.limit == rwLimit {
		readers := 0
		for en := r.holders.head; en != nil; en = en.qnext {
			if en.shared {
				readers++
			}
		}
		return readers == r.holders.n || r.holders.n == 1
	}
	n := r.holders.n + r.reserved
	return n <= r.limit && (n == r.limit || r.waiters.n == 0)
}

func (s *shard) readDelaysLocked(d *stateReader, rs *restoring) {
	n := d.count()
	for range n {
		i := d.index(len(rs.res))
		until := d.varint()
		if d.err != nil {
			return
		}
		s.holdBackLocked(rs.res[i], until)
	}
	for range d.count() {
		i := d.index(len(rs.ents))
		delay := time.Duration(d.varint())
		if d.err != nil {
			return
		}
		if delay == 0 {
			d.fail("zero lock-delay override")
			return
		}
		rs.ents[i].delay = delay
	}
}

// appendDelayedLocked appends s's held-back slots to the stats list.
func (s *shard) appendDelayedLocked(list []DelayedStat, now int64) []DelayedStat {
	for _, ds := range s.delays.slots {
		list = append(list, DelayedStat{Key: ds.res.key, Limit: ds.res.limit,
			EndsInS: seconds(max(ds.until-now, 0)), Waiters: ds.res.waiters.n})
	}
	return list
}
