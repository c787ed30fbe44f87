package engine

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/fence"
)

// maxFree bounds a shard's pool of spare entries: enough to absorb a burst
// of churn, small enough that a shard that once held many keys gives the
// memory back.
const maxFree = 16

// shrinkFloor is the size below which maps and the heap are never rebuilt.
// Above it, a map or heap that has fallen to a quarter of its peak is
// copied into a fresh one: Go maps never shrink on delete, so without this
// a burst of many keys would pin their buckets for the life of the
// process.
const shrinkFloor = 64

// expireBudget bounds the deadlines one Expire call handles per shard, so
// a mass expiry never holds a shard lock for long; the rest wait for the
// next tick (next stays <= now, so the clock comes back at once).
const expireBudget = 4096

// shard owns a slice of the key space: its resources, its owners' lists,
// its deadline heap and its idle list, all under mu.
type shard struct {
	// lapsed names, per owner, the keys whose two-phase grant expired
	// before a Wait collected it, so that Wait answers ErrLeaseExpired
	// rather than ErrNotQueued. An entry goes at that Wait, at the owner's
	// next Enqueue of the key, or when the owner is dropped. Part of
	// WriteState since its version 3.
	// Under mu.
	lapsed map[OwnerID][]string

	mu      sync.Mutex
	e       *Engine
	res     map[string]*resource
	owners  map[OwnerID]*entry // head of each owner's list
	heap    deadlines
	idle    idleList
	free    []*entry
	touched []*resource
	ctr     Counters
	held    int           // slots held on this shard's resources
	waiting int           // entries in this shard's queues
	resPeak int           // most keys s.res held since it was last rebuilt
	ownPeak int           // most owners s.owners held since it was last rebuilt
	next    atomic.Int64  // earliest deadline or GC due here; read without mu
	idx     int           // its index in the engine's shards
	capt    *StateCapture // a state capture that has not encoded this shard yet; under mu
	delays  delayList     // slots held back by a lock-delay (lockdelay.go)
	watched bool          // someone watches: read once per change (watchstate.go); under mu
	_       [64]byte      // keep neighbouring shards' locks off this cache line
}

func (s *shard) init(e *Engine) {
	s.e = e
	s.res = make(map[string]*resource)
	s.owners = make(map[OwnerID]*entry)
	s.next.Store(math.MaxInt64)
}

// noteLapsedLocked records, when en is an uncollected two-phase grant
// being expired, that its owner's next Wait on the key finds it lapsed.
func (s *shard) noteLapsedLocked(en *entry) {
	if !en.twoPhase || !en.holding {
		return
	}
	if s.lapsed == nil {
		s.lapsed = make(map[OwnerID][]string)
	}
	keys := s.lapsed[en.owner]
	for _, k := range keys {
		if k == en.res.key {
			return
		}
	}
	s.lapsed[en.owner] = append(keys, en.res.key)
}

// takeLapsedLocked forgets owner's lapsed record of key and reports
// whether there was one.
func (s *shard) takeLapsedLocked(owner OwnerID, key []byte) bool {
	keys := s.lapsed[owner]
	for i, k := range keys {
		if k == string(key) {
			keys[i] = keys[len(keys)-1]
			keys[len(keys)-1] = ""
			if keys = keys[:len(keys)-1]; len(keys) == 0 {
				delete(s.lapsed, owner)
			} else {
				s.lapsed[owner] = keys
			}
			return true
		}
	}
	return false
}

// updateNextLocked publishes the earliest time Expire has work here.
func (s *shard) updateNextLocked() {
	next := int64(math.MaxInt64)
	if len(s.heap) > 0 {
		next = s.heap[0].deadline
	}
	if r := s.idle.head; r != nil {
		next = min(next, r.idleAt+int64(s.e.cfg.GCMaxIdle))
	}
	s.next.Store(s.nextDelayLocked(next))
}

func (s *shard) newEntry(res *resource, req *AcquireReq) *entry {
	var en *entry
	if n := len(s.free); n > 0 {
		en = s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
	} else {
		en = &entry{}
	}
	*en = entry{res: res, owner: req.Owner, salt: req.Salt, ttl: req.TTL, hidx: -1, shared: req.Mode == ModeRead,
		delay: req.LockDelay}
	s.linkOwner(en)
	return en
}

// freeEntry drops en, which must be off every list and out of the heap.
func (s *shard) freeEntry(en *entry) {
	*en = entry{}
	if len(s.free) < maxFree {
		s.free = append(s.free, en)
	}
}

func (s *shard) linkOwner(en *entry) {
	head := s.owners[en.owner]
	en.oprev, en.onext = nil, head
	if head != nil {
		head.oprev = en
	}
	s.owners[en.owner] = en
	if n := len(s.owners); n > s.ownPeak {
		s.ownPeak = n
	}
}

func (s *shard) unlinkOwner(en *entry) {
	if en.oprev != nil {
		en.oprev.onext = en.onext
	} else if en.onext != nil {
		s.owners[en.owner] = en.onext
	} else {
		delete(s.owners, en.owner)
		if s.ownPeak > shrinkFloor && len(s.owners) < s.ownPeak/4 {
			s.owners = rebuilt(s.owners)
			s.ownPeak = len(s.owners)
		}
	}
	if en.onext != nil {
		en.onext.oprev = en.oprev
	}
	en.oprev, en.onext = nil, nil
}

// rebuilt copies m into a map sized for its current length. (maps.Clone
// would keep the old table's size.)
func rebuilt[K comparable, V any](m map[K]V) map[K]V {
	n := make(map[K]V, len(m))
	for k, v := range m {
		n[k] = v
	}
	return n
}

// findOwned returns owner's entry on res (a two-phase one if twoPhase).
func (s *shard) findOwned(owner OwnerID, res *resource, twoPhase bool) *entry {
	for en := s.owners[owner]; en != nil; en = en.onext {
		if en.res == res && (!twoPhase || en.twoPhase) {
			return en
		}
	}
	return nil
}

// resourceLocked returns key's resource, creating it (idle) if needed.
// An idle resource takes a new limit; a busy one refuses another.
func (s *shard) resourceLocked(now int64, key []byte, limit int) (*resource, error) {
	if r := s.res[string(key)]; r != nil {
		if r.limit != limit {
			if !r.empty() {
				return nil, ErrLimitMismatch
			}
			r.limit = limit
		}
		return r, nil
	}
	if err := s.reserveKeyLocked(); err != nil {
		return nil, err
	}
	r := &resource{key: string(key), limit: limit}
	s.res[r.key] = r
	if n := len(s.res); n > s.resPeak {
		s.resPeak = n
	}
	s.idle.pushBack(r, now)
	return r, nil
}

// reserveKeyLocked counts a new key against MaxKeys, evicting this shard's
// oldest idle key when the engine is full.
func (s *shard) reserveKeyLocked() error {
	max := int64(s.e.cfg.MaxKeys)
	for {
		n := s.e.keys.Load()
		if max > 0 && n >= max {
			if s.idle.head == nil {
				return ErrMaxKeys
			}
			s.dropResourceLocked(s.idle.head)
			continue
		}
		if s.e.keys.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

func (s *shard) dropResourceLocked(r *resource) {
	s.idle.remove(r)
	delete(s.res, r.key)
	s.e.keys.Add(-1)
	s.ctr.Pruned++
	if s.resPeak > shrinkFloor && len(s.res) < s.resPeak/4 {
		s.res = rebuilt(s.res)
		s.resPeak = len(s.res)
	}
}

// grantLocked gives en a slot of its resource and a fresh token.
func (s *shard) grantLocked(now int64, en *entry) {
	en.token = fence.Token{Fence: s.e.nextFence(), Salt: en.salt}
	en.holding = true
	en.res.holders.pushBack(en)
	s.held++
	s.heap.set(en, now+int64(en.ttl))
	s.ctr.Grants++
	s.note(EventGranted, en.res, en)
}

// promoteLocked grants free slots of res to its oldest waiters and queues
// their Sink calls on d. It marks res idle when nothing is left on it. A
// read-write key grants the head of its queue while the head can be
// granted, so the readers at the head go together and a writer goes alone.
func (s *shard) promoteLocked(now int64, res *resource, d *[]delivery) *[]delivery {
	rw := res.limit == rwLimit
	if rw && res.reserved != 0 { // a lock-delay holds the key back
		return d
	}
	for en := res.waiters.head; en != nil && !s.e.draining.Load(); en = res.waiters.head {
		if rw {
			if res.holders.n != 0 && !(en.shared && res.holders.head.shared) {
				break
			}
		} else if res.holders.n+res.reserved >= res.limit {
			break
		} else if en.set != nil {
			s.noteSetLocked(en) // granted with its set's other keys
			break
		}
		res.waiters.remove(en)
		s.waiting--
		s.grantLocked(now, en)
		if en.sink != nil {
			d = appendDelivery(d, en.sink, Outcome{Result: Granted, Token: en.token, TTL: en.ttl})
			en.sink = nil
		}
	}
	if res.empty() && !res.idle {
		s.idle.pushBack(res, now)
	}
	return d
}

func appendDelivery(d *[]delivery, sink Sink, out Outcome) *[]delivery {
	if d == nil {
		d = deliveryPool.Get().(*[]delivery)
	}
	*d = append(*d, delivery{sink: sink, out: out})
	return d
}

// removeLocked takes en off its resource, the heap and its owner's list,
// and frees it. The caller promotes the resource afterwards.
func (s *shard) removeLocked(en *entry) {
	if en.holding {
		en.res.holders.remove(en)
		s.held--
	} else {
		en.res.waiters.remove(en)
		s.waiting--
		s.note(EventWaiters, en.res, nil)
	}
	if en.hidx >= 0 {
		s.heap.remove(en)
	}
	s.unlinkOwner(en)
	s.e.own.done(en.owner)
	s.freeEntry(en)
}

func (s *shard) acquire(now int64, req *AcquireReq, sink Sink, twoPhase bool) (Outcome, error) {
	s.lockW()
	if s.e.draining.Load() { // read under mu: Drain's pass comes after
		s.mu.Unlock()
		return Outcome{}, ErrDraining
	}
	if s.e.own.max > 0 && s.res[string(req.Key)] == nil && s.e.own.full(req.Owner) {
		// Refused before the key is made: an owner at its cap does not
		// fill the table with idle keys (nor evict others' to do so).
		s.mu.Unlock()
		return Outcome{}, ErrOwnerMaxKeys
	}
	res, err := s.resourceLocked(now, req.Key, req.Limit)
	if err != nil {
		s.mu.Unlock()
		return Outcome{}, err
	}
	if twoPhase && s.findOwned(req.Owner, res, false) != nil {
		s.mu.Unlock()
		return Outcome{}, ErrAlreadyQueued
	}
	if twoPhase && len(s.lapsed) > 0 {
		s.takeLapsedLocked(req.Owner, req.Key)
	}
	if res.holders.n+res.reserved < res.limit && res.waiters.n == 0 || res.limit == rwLimit && res.reserved == 0 && res.rwFree(req.Mode) {
		if !s.e.own.tryAdd(req.Owner) {
			s.mu.Unlock()
			return Outcome{}, ErrOwnerMaxKeys
		}
		if res.idle {
			s.idle.remove(res)
		}
		en := s.newEntry(res, req)
		// A two-phase grant stays marked until a Wait collects it, as
		// dflockd's w answers the grant its e already took.
		en.twoPhase = twoPhase
		s.grantLocked(now, en)
		out := Outcome{Result: Granted, Token: en.token, TTL: en.ttl}
		s.updateNextLocked()
		s.mu.Unlock()
		return out, nil
	}
	if !twoPhase && req.Timeout == 0 {
		s.ctr.Timeouts++
		s.mu.Unlock()
		return Outcome{Result: TimedOut}, nil
	}
	if max := s.e.cfg.MaxWaiters; max > 0 && res.waiters.n >= max {
		s.mu.Unlock()
		return Outcome{}, ErrMaxWaiters
	}
	if !s.e.own.tryAdd(req.Owner) {
		s.mu.Unlock()
		return Outcome{}, ErrOwnerMaxKeys
	}
	en := s.newEntry(res, req)
	en.twoPhase = twoPhase
	res.waiters.pushBack(en)
	s.waiting++
	s.note(EventWaiters, res, nil)
	if !twoPhase {
		en.sink = sink
		s.heap.set(en, now+int64(req.Timeout))
		s.updateNextLocked()
	}
	s.mu.Unlock()
	return Outcome{Result: Queued}, nil
}

func (s *shard) wait(now int64, key []byte, owner OwnerID, timeout time.Duration, sink Sink) (Outcome, error) {
	var d *[]delivery
	s.lockW()
	out, err := s.waitLocked(now, key, owner, timeout, sink, &d)
	s.updateNextLocked()
	s.mu.Unlock()
	deliver(d, nil)
	return out, err
}

func (s *shard) waitLocked(now int64, key []byte, owner OwnerID, timeout time.Duration, sink Sink, d **[]delivery) (Outcome, error) {
	var en *entry
	res := s.res[string(key)]
	if res != nil {
		en = s.findOwned(owner, res, true)
	}
	if s.e.draining.Load() && (en == nil || !en.holding) {
		return Outcome{}, ErrDraining
	}
	if en == nil {
		if len(s.lapsed) > 0 && s.takeLapsedLocked(owner, key) {
			return Outcome{}, ErrLeaseExpired
		}
		return Outcome{}, ErrNotQueued
	}
	en.twoPhase = false
	switch {
	case en.holding && en.deadline <= now:
		// Granted while enqueued, but the lease ran out before this wait:
		// the slot passes on, and nothing is resurrected.
		s.lostLocked(now, en, EventExpired)
		s.removeLocked(en)
		s.ctr.Expiries++
		*d = s.promoteLocked(now, res, *d)
		return Outcome{}, ErrLeaseExpired
	case en.holding:
		s.heap.set(en, now+int64(en.ttl))
		return Outcome{Result: Granted, Token: en.token, TTL: en.ttl}, nil
	case timeout == 0:
		// A waiter never blocks a free slot (see resource), but a
		// writer at the head of a read-write queue holds back the
		// readers behind it: promote.
		s.removeLocked(en)
		*d = s.promoteLocked(now, res, *d)
		s.ctr.Timeouts++
		return Outcome{Result: TimedOut}, nil
	}
	en.sink = sink
	s.heap.set(en, now+int64(timeout))
	return Outcome{Result: Queued}, nil
}

func (s *shard) cancelWait(now int64, key []byte, owner OwnerID) bool {
	s.lockW()
	res := s.res[string(key)]
	var en *entry
	if res != nil {
		for en = s.owners[owner]; en != nil; en = en.onext {
			// A parked request is queued and not two-phase (a Wait clears
			// the mark). Not en.sink: replicas without the Sink must find
			// the same entry.
			if en.res == res && !en.holding && !en.twoPhase && en.set == nil {
				break
			}
		}
	}
	if en == nil {
		s.mu.Unlock()
		return false
	}
	sink := en.sink
	// A waiter never blocks a free slot (see resource), but a writer at
	// the head of a read-write queue holds back the readers behind it.
	s.removeLocked(en)
	d := s.promoteLocked(now, res, nil)
	s.updateNextLocked()
	s.mu.Unlock()
	if sink != nil {
		sink.Deliver(Outcome{Result: Canceled})
	}
	deliver(d, nil)
	return true
}

// holderLocked finds the live holder of key with tok. A lease found past
// its deadline is expired on the spot (its slot handed on, queued on d).
func (s *shard) holderLocked(now int64, key []byte, tok fence.Token, d **[]delivery) *entry {
	res := s.res[string(key)]
	if res == nil {
		return nil
	}
	en := res.findHolder(tok)
	if en == nil {
		return nil
	}
	if en.deadline <= now {
		s.noteLapsedLocked(en)
		s.lostLocked(now, en, EventExpired)
		s.removeLocked(en)
		s.ctr.Expiries++
		*d = s.promoteLocked(now, res, *d)
		return nil
	}
	return en
}

func (s *shard) release(now int64, key []byte, tok fence.Token, via Via) error {
	var d *[]delivery
	s.lockW()
	en := s.holderLocked(now, key, tok, &d)
	if en != nil {
		res := en.res
		s.note(EventReleased, res, en)
		s.removeLocked(en)
		s.ctr.Releases++
		d = s.promoteLocked(now, res, d)
	}
	s.updateNextLocked()
	s.mu.Unlock()
	deliver(d, via)
	if en == nil {
		return ErrNotHolder
	}
	return nil
}

func (s *shard) renew(now int64, key []byte, tok fence.Token, ttl time.Duration, owner OwnerID) (time.Duration, error) {
	var d *[]delivery
	s.lockW()
	en := s.holderLocked(now, key, tok, &d)
	if en != nil {
		if owner != 0 && owner != en.owner && s.findOwned(owner, en.res, false) == nil {
			s.unlinkOwner(en)
			s.e.own.done(en.owner)
			en.owner = owner
			s.e.own.add(owner)
			s.linkOwner(en)
		}
		if ttl > 0 {
			en.ttl = ttl
		}
		ttl = en.ttl
		s.heap.set(en, now+int64(ttl))
		s.ctr.Renewals++
	}
	s.updateNextLocked()
	s.mu.Unlock()
	deliver(d, nil)
	if en == nil {
		return 0, ErrNotHolder
	}
	return ttl, nil
}

func (s *shard) dropOwner(now int64, owner OwnerID, keepHeld bool, via Via) {
	var d *[]delivery
	s.mu.Lock()
	en := s.owners[owner]
	_, lapsed := s.lapsed[owner]
	if en == nil && !lapsed {
		// Nothing of owner's here: a state capture may keep waiting for
		// this shard (a disconnect visits every shard).
		s.mu.Unlock()
		return
	}
	s.settleLocked()
	s.watchLocked()
	if lapsed {
		delete(s.lapsed, owner)
	}
	if en == nil {
		s.mu.Unlock()
		return
	}
	touched := s.touched[:0]
	for en != nil {
		next := en.onext
		res := en.res
		switch {
		case en.set != nil:
			en = next // a waiting set goes as one (withdrawSets)
			continue
		case en.holding && keepHeld:
			// Nobody is left to collect a two-phase grant: its expiry
			// must not leave a lapsed record behind.
			en.twoPhase = false
			en = next
			continue
		case en.holding:
			s.ctr.Dropped++
			s.lostLocked(now, en, EventDropped)
		case en.sink != nil:
			d = appendDelivery(d, en.sink, Outcome{Result: Canceled})
		}
		s.removeLocked(en)
		if !res.touched {
			res.touched = true
			touched = append(touched, res)
		}
		en = next
	}
	// Promote only after every entry of the owner is gone, so no slot is
	// handed to a request of the owner being dropped.
	for i, res := range touched {
		res.touched = false
		d = s.promoteLocked(now, res, d)
		touched[i] = nil
	}
	s.touched = touched[:0]
	s.updateNextLocked()
	s.mu.Unlock()
	deliver(d, via)
}

// drain withdraws every waiter of the shard, parked ones hearing Drained,
// and returns how many. The engine's draining flag is already set, so no
// new waiter comes and nothing is handed on.
func (s *shard) drain(now int64) int {
	var d *[]delivery
	n := 0
	s.lockW()
	for _, res := range s.res {
		for en := res.waiters.head; en != nil; en = res.waiters.head {
			if en.sink != nil {
				d = appendDelivery(d, en.sink, Outcome{Result: Drained})
			}
			s.removeLocked(en)
			n++
		}
		if res.empty() && !res.idle {
			s.idle.pushBack(res, now)
		}
	}
	s.updateNextLocked()
	s.mu.Unlock()
	deliver(d, nil)
	return n
}

func (s *shard) expire(now int64) {
	if s.next.Load() > now {
		return
	}
	var d *[]delivery
	s.lockW()
	budget := expireBudget
	for len(s.heap) > 0 && s.heap[0].deadline <= now && budget > 0 {
		budget--
		en := s.heap[0]
		res := en.res
		if en.set != nil {
			s.expireSetLocked(en)
			continue
		}
		if en.holding {
			s.ctr.Expiries++
			s.noteLapsedLocked(en)
			s.lostLocked(now, en, EventExpired)
		} else {
			s.ctr.Timeouts++
			if en.sink != nil {
				d = appendDelivery(d, en.sink, Outcome{Result: TimedOut})
			}
		}
		s.removeLocked(en)
		d = s.promoteLocked(now, res, d)
	}
	d = s.expireDelaysLocked(now, d)
	maxIdle := int64(s.e.cfg.GCMaxIdle)
	for r := s.idle.head; r != nil && r.idleAt+maxIdle <= now && budget > 0; r = s.idle.head {
		budget--
		s.dropResourceLocked(r)
	}
	s.updateNextLocked()
	s.mu.Unlock()
	deliver(d, nil)
}
