package engine

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/latchd/latchd/fence"
)

// ReadState restores a state written by WriteState into e, which must be
// empty (new, with no call made) and built with the same Shards as the
// writer; MaxKeys must admit the restored keys. On error e is left in an
// unspecified state and must be discarded.
//
// A restored parked request (an Acquire or Wait that was waiting with a
// deadline) has no Sink: the process that parked it is the only one that
// had one. It keeps its place in the queue and its deadline, is granted or
// times out exactly as on the writer, and nobody hears the Outcome; like
// an unclaimed two-phase entry, a grant it gets is held until its lease
// expires or its owner is dropped.
func (e *Engine) ReadState(r io.Reader) error {
	if !e.isEmpty() {
		return fmt.Errorf("%w: engine is not empty", ErrBadState)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(b) < len(stateMagic)+1+4 || string(b[:len(stateMagic)]) != stateMagic {
		return fmt.Errorf("%w: bad magic", ErrBadState)
	}
	v := b[len(stateMagic)]
	if v < 1 || v > stateVersionDelays {
		return fmt.Errorf("%w: version %d, want 1 to %d", ErrBadState, v, stateVersionDelays)
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, crcTable) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return fmt.Errorf("%w: checksum mismatch", ErrBadState)
	}
	d := &stateReader{b: body[len(stateMagic)+1:], version: v}
	if n := d.uvarint(); d.err == nil && n != uint64(len(e.shards)) {
		return fmt.Errorf("%w: %d shards, engine has %d", ErrBadState, n, len(e.shards))
	}
	e.fence.Store(d.uvarint())
	var keys int64
	rss := make([]restoring, len(e.shards))
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		rss[i] = s.readStateLocked(d)
		keys += int64(len(s.res))
		s.mu.Unlock()
		if d.err != nil {
			return d.err
		}
	}
	e.keys.Store(keys)
	e.sess.readState(d)
	if d.version >= 3 {
		e.readLapsed(d)
	}
	if d.version >= setsVersion {
		e.readSets(d)
	}
	if d.version >= stateVersionDelays {
		e.readDelays(d, rss)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return d.err
	}
	if max := e.cfg.MaxKeys; max > 0 && keys > int64(max) {
		return fmt.Errorf("%w: %d keys over MaxKeys %d", ErrBadState, keys, max)
	}
	return nil
}

// isEmpty reports whether e holds no key, session or issued fence (an
// entry or an owner list lives on a key, and e.keys counts them all).
func (e *Engine) isEmpty() bool {
	return e.keys.Load() == 0 && e.fence.Load() == e.cfg.FenceSeed && e.Sessions() == 0
}

// readStateLocked restores one shard as appendStateLocked wrote it: its
// counters, its resources with their holders and waiters, then the idle
// list, the deadline heap and the owner lists, which name the resources
// and entries by the order they were read in.
func (s *shard) readStateLocked(d *stateReader) restoring {
	s.next.Store(d.varint())
	for _, c := range s.ctr.all() {
		*c = d.uvarint()
	}
	nres := d.count()
	rs := restoring{res: make([]*resource, 0, nres), inHeap: make(map[*entry]bool)}
	for range nres {
		if !s.readResourceLocked(d, &rs) {
			return rs
		}
	}
	if !s.readIdleLocked(d, rs.res) || !s.readHeapLocked(d, &rs) || !s.readOwnersLocked(d, rs.ents) {
		return rs
	}
	s.resPeak, s.ownPeak = len(s.res), len(s.owners) // for the shrink heuristic
	for _, en := range rs.ents {
		if en.holding && en.hidx < 0 {
			d.fail("holder without a deadline")
			return rs
		}
	}
	return rs
}

// restoring is what readStateLocked has read of a shard so far: its
// resources and entries in the order written, and the entries marked as
// in the heap.
type restoring struct {
	res    []*resource
	ents   []*entry
	inHeap map[*entry]bool
}

// readResourceLocked reads one resource with its holders and waiters into
// s and rs, and reports whether d is still without error.
func (s *shard) readResourceLocked(d *stateReader, rs *restoring) bool {
	key := d.bytes()
	r := &resource{key: string(key), limit: d.intv()}
	switch d.byte() {
	case 0:
	case 1:
		r.idle, r.idleAt = true, d.varint()
	default:
		d.fail("bad idle mark")
	}
	if d.err != nil {
		return false
	}
	if r.limit < 0 || s.res[r.key] != nil || s.e.shardFor(key) != s {
		d.fail("bad resource %q", key)
		return false
	}
	for qi, q := range [...]*queue{&r.holders, &r.waiters} {
		for range d.count() {
			en, inHeap := readEntry(d, r, qi == 0)
			if d.err != nil {
				return false
			}
			if inHeap {
				rs.inHeap[en] = true
			}
			q.pushBack(en)
			rs.ents = append(rs.ents, en)
		}
	}
	// A slot is free with waiters only behind a waiting set at the head.
	// From version 5 a lock-delay may hold a slot back: readDelays checks
	// these once it has read them.
	headSet := r.holders.n < r.limit && r.waiters.head != nil && r.waiters.head.set != nil
	if d.version < stateVersionDelays && (!(r.consistent() || headSet) || r.idle != r.empty()) {
		d.fail("resource %q breaks its invariants", key)
		return false
	}
	s.res[r.key] = r
	s.held += r.holders.n
	s.waiting += r.waiters.n
	rs.res = append(rs.res, r)
	return true
}

// readEntry reads one entry of r as appendEntry wrote it, and whether it
// was in the heap.
func readEntry(d *stateReader, r *resource, holding bool) (*entry, bool) {
	en := &entry{res: r, hidx: -1, holding: holding}
	en.owner = OwnerID(d.uvarint())
	en.token = fence.Token{Fence: d.uvarint(), Salt: d.uint64()}
	en.salt = d.uint64()
	en.ttl = time.Duration(d.varint())
	en.deadline = d.varint()
	f := d.byte()
	en.twoPhase = f&flagTwoPhase != 0
	en.shared = f&flagShared != 0
	if en.shared && r.limit != rwLimit {
		d.fail("a shared entry on a key with limit %d", r.limit)
	}
	if f&flagSet != 0 {
		en.set = &restoringSet // linked by readSets
	}
	return en, f&flagInHeap != 0
}

// readIdleLocked reads the idle list in its order; every idle resource
// must be on it.
func (s *shard) readIdleLocked(d *stateReader, ress []*resource) bool {
	for range d.count() {
		i := d.index(len(ress))
		if d.err != nil {
			return false
		}
		r := ress[i]
		if !r.idle || r.iprev != nil || s.idle.head == r {
			d.fail("bad idle list")
			return false
		}
		s.idle.pushBack(r, r.idleAt)
	}
	for _, r := range ress {
		if r.idle && r.iprev == nil && s.idle.head != r {
			d.fail("idle resource %q not on the idle list", r.key)
			return false
		}
	}
	return d.err == nil
}

// readHeapLocked reads the deadline heap in its exact layout (it decides
// which of two equal deadlines Expire handles first): the entries marked
// as in the heap, each once, in heap order.
func (s *shard) readHeapLocked(d *stateReader, rs *restoring) bool {
	nheap := d.count()
	s.heap = make(deadlines, 0, nheap)
	for range nheap {
		i := d.index(len(rs.ents))
		if d.err != nil {
			return false
		}
		en := rs.ents[i]
		if !rs.inHeap[en] || en.hidx >= 0 {
			d.fail("bad heap")
			return false
		}
		en.hidx = len(s.heap)
		s.heap = append(s.heap, en)
	}
	for i, en := range s.heap {
		if i > 0 && s.heap[(i-1)/2].deadline > en.deadline {
			d.fail("heap order broken")
			return false
		}
	}
	if len(s.heap) != len(rs.inHeap) {
		d.fail("heap holds %d entries, %d marked", len(s.heap), len(rs.inHeap))
		return false
	}
	return d.err == nil
}

// readOwnersLocked reads the owner lists in their order, counting each
// owner's entries for MaxKeysPerOwner; every entry must be on its owner's.
func (s *shard) readOwnersLocked(d *stateReader, ents []*entry) bool {
	linked := 0
	for range d.count() {
		id := OwnerID(d.uvarint())
		n := d.count()
		if d.err == nil && (n == 0 || s.owners[id] != nil) {
			d.fail("bad owner list of %d", id)
		}
		var tail *entry
		for range n {
			i := d.index(len(ents))
			if d.err != nil {
				return false
			}
			en := ents[i]
			if en.owner != id || en.oprev != nil || s.owners[id] == en {
				d.fail("bad owner list of %d", id)
				return false
			}
			if tail == nil {
				s.owners[id] = en
			} else {
				tail.onext, en.oprev = en, tail
			}
			tail = en
			linked++
			s.e.own.add(id)
		}
	}
	if d.err == nil && linked != len(ents) {
		d.fail("%d entries, %d on owner lists", len(ents), linked)
	}
	return d.err == nil
}

func (ss *sessions) readState(d *stateReader) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	// The reserved field and the next deadline are recomputed from the
	// sessions (a state written before the heap holds a scan time there).
	_ = d.varint()
	_ = d.varint()
	for range d.count() {
		id := OwnerID(d.uvarint())
		s := &session{owner: id, ttl: time.Duration(d.varint()), lastSeen: d.varint(), busy: int(d.varint()), hidx: -1}
		if d.version >= 2 {
			s.key = d.uvarint()
		}
		if d.err != nil {
			return
		}
		if ss.m[id] != nil {
			d.fail("session %d twice", id)
			return
		}
		if s.ttl <= 0 {
			d.fail("session %d with ttl %v", id, s.ttl)
			return
		}
		// Only an older engine wrote a negative count (an EndSession after
		// a reopen), and that session could never expire: it can now.
		s.busy = max(s.busy, 0)
		ss.m[id] = s
	}
	ss.rebuildLocked()
}

func (e *Engine) readLapsed(d *stateReader) {
	for range d.count() {
		i := d.index(len(e.shards))
		id := OwnerID(d.uvarint())
		nk := d.count()
		if d.err != nil {
			return
		}
		s := &e.shards[i]
		s.mu.Lock()
		if nk == 0 || s.lapsed[id] != nil {
			s.mu.Unlock()
			d.fail("bad lapsed list of %d", id)
			return
		}
		keys := make([]string, 0, nk)
		for range nk {
			keys = append(keys, string(d.bytes()))
		}
		if s.lapsed == nil {
			s.lapsed = make(map[OwnerID][]string)
		}
		s.lapsed[id] = keys
		s.mu.Unlock()
	}
}
