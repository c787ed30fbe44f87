package engine

import (
	"cmp"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/fence"
)

// MaxSetKeys is the most keys one AcquireSet takes at once.
const MaxSetKeys = 16

// How a set of keys is taken, all or none (AcquireSet):
//
// A set that cannot be granted at once is queued on all its keys in one
// step, under the locks of all its keys' shards, taken in shard index
// order: one waiting entry per key, linked to one set record (kset). It is
// granted when its entry is at the head of every key's queue with a free
// slot there, and then it takes all its slots in one step, each with its
// own fence. Because a set joins every queue at one moment, two sets that
// share keys are in the same order on all of them: the oldest waiter
// anywhere is at the head of every queue it is in, so nothing waits in a
// cycle (no deadlock), and strict FIFO per key means nobody is overtaken
// forever (no starvation). The price is that a set at the head of a free
// key keeps later waiters of that key behind it until its other keys come
// free.
//
// A set entry at the head of a key with a free slot is not granted under
// that one shard's lock (the other shards' locks would be taken out of
// order): the shard notes the set as pending, and the engine call that
// made the change checks pending sets after it drops its lock
// (settleSets), locking each set's shards in order. On a replica the
// calls are applied one at a time, so the checks, and the fences they
// issue, come in the same order on every replica.
//
// Once granted, the set's entries are ordinary holdings: each key is
// released, renewed, expired and dropped with its owner on its own, by
// its own token (ReleaseSet and RenewSet do many at once). Only a wait
// belongs to the set: it times out, is canceled or dropped as one.

// SetReq is a request for a set of keys, all or none.
type SetReq struct {
	Keys    [][]byte // distinct, 1 to MaxSetKeys
	Owner   OwnerID
	Limit   int           // slots of each key; 1 for locks
	TTL     time.Duration // each key's lease; 0 means Config.DefaultTTL
	Timeout time.Duration // how long to wait; 0 = try once
	Salt    uint64        // token salts of the keys derive from it
}

// SetOutcome is what AcquireSet or its SetSink hears: on Granted, one
// token per key, in the order of SetReq.Keys.
type SetOutcome struct {
	Result Result
	N      int // keys
	Tokens [MaxSetKeys]fence.Token
	TTL    time.Duration
}

// SetSink receives exactly one SetOutcome per AcquireSet answered Queued,
// outside all engine locks; it must not block or call into the engine.
type SetSink interface{ DeliverSet(*SetOutcome) }

// kset is a waiting set: its entries, one per key, in the request's
// order. ents[0] carries the wait's deadline in its shard's heap.
type kset struct {
	owner    OwnerID
	n        int
	ents     [MaxSetKeys]*entry
	keys     [MaxSetKeys]string
	sidx     [MaxSetKeys]uint16 // each entry's shard
	locks    [MaxSetKeys]uint16 // its shards, distinct, ascending
	nl       int
	ttl      time.Duration
	sink     SetSink
	out      SetOutcome // what its SetSink hears, kept here so the hand-off allocates nothing
	done     bool       // granted or withdrawn; under the locks of its shards
	timedOut bool       // its deadline passed; under its first entry's shard lock
	refs     int32      // holders of a pointer to it, under the registry's mu (kset_pool.go)
	prev     *kset
	next     *kset // the registry's list, oldest first; the free list's link
}

// setRegistry is the engine's waiting sets. mu is a leaf: it is taken
// under shard locks and takes nothing.
type setRegistry struct {
	mu      sync.Mutex
	head    *kset
	tail    *kset
	n       int
	pending []*kset // sets to check, in the order they were noted
	spare   []*kset
	free    *kset // sets done with, for reuse (kset_pool.go)
	npend   atomic.Int32
}

func (r *setRegistry) add(ks *kset) {
	r.mu.Lock()
	ks.prev, ks.next = r.tail, nil
	if r.tail != nil {
		r.tail.next = ks
	} else {
		r.head = ks
	}
	r.tail = ks
	r.n++
	ks.refs++
	r.mu.Unlock()
}

func (r *setRegistry) remove(ks *kset) {
	r.mu.Lock()
	if ks.prev != nil {
		ks.prev.next = ks.next
	} else {
		r.head = ks.next
	}
	if ks.next != nil {
		ks.next.prev = ks.prev
	} else {
		r.tail = ks.prev
	}
	ks.prev, ks.next = nil, nil
	r.n--
	r.unrefLocked(ks)
	r.mu.Unlock()
}

// note records that ks may be ready (or has timed out).
func (r *setRegistry) note(ks *kset) {
	r.mu.Lock()
	r.pending = append(r.pending, ks)
	ks.refs++
	r.npend.Store(int32(len(r.pending)))
	r.mu.Unlock()
}

// take returns the pending sets and clears the list.
func (r *setRegistry) take() []*kset {
	r.mu.Lock()
	p := r.pending
	r.pending = r.spare[:0]
	r.spare = nil
	r.npend.Store(0)
	r.mu.Unlock()
	return p
}

// giveBack keeps the list take returned for reuse, done with its sets.
func (r *setRegistry) giveBack(p []*kset) {
	r.mu.Lock()
	for _, ks := range p {
		r.unrefLocked(ks)
	}
	clear(p)
	switch {
	case r.pending == nil:
		r.pending = p[:0]
	case r.spare == nil:
		r.spare = p[:0]
	}
	r.mu.Unlock()
}

// list returns the waiting sets, oldest first, that match (nil: all).
func (r *setRegistry) list(match func(*kset) bool) []*kset {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*kset
	for ks := r.head; ks != nil; ks = ks.next {
		if match == nil || match(ks) {
			ks.refs++ // dropped by release
			out = append(out, ks)
		}
	}
	return out
}

// setSalt derives the token salt of a set's i-th key (splitmix64).
func setSalt(salt uint64, i int) uint64 {
	z := salt + uint64(i)*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// setShards fills idx with each key's shard and locks with the distinct
// shards in ascending order, and returns how many.
func (e *Engine) setShards(keys [][]byte, idx *[MaxSetKeys]uint16, locks *[MaxSetKeys]uint16) int {
	nl := 0
	for i, k := range keys {
		x := uint16(e.shardFor(k).idx)
		idx[i] = x
		j := nl
		for j > 0 && locks[j-1] > x {
			j--
		}
		if j > 0 && locks[j-1] == x {
			continue
		}
		copy(locks[j+1:nl+1], locks[j:nl])
		locks[j] = x
		nl++
	}
	return nl
}

func (e *Engine) lockSet(locks []uint16) {
	for _, x := range locks {
		e.shards[x].lockW()
	}
}

func (e *Engine) unlockSet(locks []uint16) {
	for i := len(locks) - 1; i >= 0; i-- {
		s := &e.shards[locks[i]]
		s.updateNextLocked()
		s.mu.Unlock()
	}
}

func (e *Engine) checkSet(req *SetReq) error {
	n := len(req.Keys)
	if n == 0 || n > MaxSetKeys || req.Limit < 1 || req.TTL < 0 || req.Timeout < 0 {
		return ErrBadRequest
	}
	for i, k := range req.Keys {
		if len(k) == 0 {
			return ErrBadRequest
		}
		for _, o := range req.Keys[:i] {
			if string(o) == string(k) {
				return ErrBadRequest
			}
		}
	}
	req.TTL = cmp.Or(req.TTL, e.cfg.DefaultTTL)
	return nil
}

// AcquireSet takes a slot of every key of req, all or none, each with its
// own fence. It answers Granted (tokens in the order of req.Keys) when
// every key has a free slot and nobody queued, TimedOut when Timeout is 0
// and not, and otherwise queues the set on all its keys at once: Queued,
// and sink later hears Granted, TimedOut, Canceled or Drained. A key of
// another limit than req.Limit that is in use is ErrLimitMismatch.
func (e *Engine) AcquireSet(now int64, req *SetReq, sink SetSink) (SetOutcome, error) {
	if err := e.checkSet(req); err != nil {
		return SetOutcome{}, err
	}
	out, err := e.acquireSet(now, req, sink)
	if err == ErrMaxKeys && e.evictIdle(nil) {
		out, err = e.acquireSet(now, req, sink)
	}
	e.countRefusal(err)
	return out, err
}

func (e *Engine) acquireSet(now int64, req *SetReq, sink SetSink) (SetOutcome, error) {
	var idx, locks [MaxSetKeys]uint16
	var ress [MaxSetKeys]*resource
	nl := e.setShards(req.Keys, &idx, &locks)
	e.lockSet(locks[:nl])
	defer e.unlockSet(locks[:nl])
	if e.draining.Load() {
		return SetOutcome{}, ErrDraining
	}
	free := true
	for i, k := range req.Keys {
		s := &e.shards[idx[i]]
		if e.own.max > 0 && s.res[string(k)] == nil && e.own.full(req.Owner) {
			return SetOutcome{}, ErrOwnerMaxKeys
		}
		r, err := s.resourceLocked(now, k, req.Limit)
		if err != nil {
			return SetOutcome{}, err
		}
		ress[i] = r
	}
	for i, k := range req.Keys {
		// Making a later key may have evicted an earlier idle one.
		if e.shards[idx[i]].res[string(k)] != ress[i] {
			return SetOutcome{}, ErrMaxKeys
		}
		free = free && ress[i].holders.n+ress[i].reserved < ress[i].limit && ress[i].waiters.n == 0
	}
	n := len(req.Keys)
	if !free && req.Timeout == 0 {
		e.shards[idx[0]].ctr.Timeouts++
		return SetOutcome{Result: TimedOut, N: n}, nil
	}
	if max := e.cfg.MaxWaiters; !free && max > 0 {
		for _, r := range ress[:n] {
			if r.waiters.n >= max {
				return SetOutcome{}, ErrMaxWaiters
			}
		}
	}
	for i := range n {
		if !e.own.tryAdd(req.Owner) {
			for range i {
				e.own.done(req.Owner)
			}
			return SetOutcome{}, ErrOwnerMaxKeys
		}
	}
	if free {
		out := SetOutcome{Result: Granted, N: n, TTL: req.TTL}
		for i := range n {
			s, r := &e.shards[idx[i]], ress[i]
			if r.idle {
				s.idle.remove(r)
			}
			en := s.newEntry(r, &AcquireReq{Owner: req.Owner, TTL: req.TTL, Salt: setSalt(req.Salt, i)})
			s.grantLocked(now, en)
			out.Tokens[i] = en.token
		}
		return out, nil
	}
	ks := e.sets.get()
	*ks = kset{owner: req.Owner, n: n, sidx: idx, locks: locks, nl: nl, ttl: req.TTL, sink: sink}
	for i := range n {
		s, r := &e.shards[idx[i]], ress[i]
		if r.idle {
			s.idle.remove(r)
		}
		en := s.newEntry(r, &AcquireReq{Owner: req.Owner, TTL: req.TTL, Salt: setSalt(req.Salt, i)})
		en.set = ks
		r.waiters.pushBack(en)
		s.waiting++
		ks.ents[i], ks.keys[i] = en, r.key
	}
	e.shards[idx[0]].heap.set(ks.ents[0], now+int64(req.Timeout))
	e.sets.add(ks)
	return SetOutcome{Result: Queued, N: n}, nil
}

// noteSetLocked is promoteLocked's hook: en, a set's entry, is at the
// head of a key with a free slot. Under en's shard lock.
func (s *shard) noteSetLocked(en *entry) { s.e.sets.note(en.set) }

// expireSetLocked is expire's hook: en, a set's first entry, reached its
// wait deadline. Under en's shard lock.
func (s *shard) expireSetLocked(en *entry) {
	s.heap.remove(en)
	en.set.timedOut = true
	s.e.sets.note(en.set)
}

// settleSets grants, or withdraws as timed out, the sets noted pending.
// Every engine call that can free a slot or end a wait calls it last.
func (e *Engine) settleSets(now int64, via Via) {
	for e.sets.npend.Load() != 0 {
		p := e.sets.take()
		for _, ks := range p {
			e.settleSet(now, ks, via)
		}
		e.sets.giveBack(p)
	}
}

func (e *Engine) settleSet(now int64, ks *kset, via Via) {
	var d *[]delivery
	heard := false
	locks := ks.locks[:ks.nl]
	e.lockSet(locks)
	switch {
	case ks.done:
	case ks.timedOut:
		ks.out = SetOutcome{Result: TimedOut, N: ks.n}
		e.shards[ks.sidx[0]].ctr.Timeouts++
		d, heard = e.withdrawSetLocked(now, ks, d), true
	case ks.readyLocked():
		ks.out = SetOutcome{Result: Granted, N: ks.n, TTL: ks.ttl}
		d, heard = e.grantSetLocked(now, ks, &ks.out, d), true
	}
	e.unlockSet(locks)
	deliver(d, via)
	// ks is done: nothing writes ks.out again.
	if heard && ks.sink != nil {
		ks.sink.DeliverSet(&ks.out)
	}
}

// readyLocked reports whether ks heads every queue it is in with a slot
// free there.
func (ks *kset) readyLocked() bool {
	for _, en := range ks.ents[:ks.n] {
		r := en.res
		if r.waiters.head != en || r.holders.n+r.reserved >= r.limit {
			return false
		}
	}
	return true
}

// grantSetLocked turns ks's entries into holdings, with tokens in out.
func (e *Engine) grantSetLocked(now int64, ks *kset, out *SetOutcome, d *[]delivery) *[]delivery {
	ks.done = true
	e.sets.remove(ks)
	for i, en := range ks.ents[:ks.n] {
		s := &e.shards[ks.sidx[i]]
		en.res.waiters.remove(en)
		s.waiting--
		en.set = nil
		if en.hidx >= 0 {
			s.heap.remove(en)
		}
		s.grantLocked(now, en)
		out.Tokens[i] = en.token
		ks.ents[i] = nil
	}
	// A semaphore's further free slots go on to the waiters behind.
	for i := range ks.n {
		s := &e.shards[ks.sidx[i]]
		d = s.promoteLocked(now, s.res[ks.keys[i]], d)
	}
	return d
}

// withdrawSetLocked takes ks off all its keys and hands on what it kept.
func (e *Engine) withdrawSetLocked(now int64, ks *kset, d *[]delivery) *[]delivery {
	ks.done = true
	e.sets.remove(ks)
	var ress [MaxSetKeys]*resource
	var shs [MaxSetKeys]*shard
	for i, en := range ks.ents[:ks.n] {
		shs[i], ress[i] = &e.shards[ks.sidx[i]], en.res
		shs[i].removeLocked(en)
		ks.ents[i] = nil
	}
	for i := range ks.n {
		d = shs[i].promoteLocked(now, ress[i], d)
	}
	return d
}

// withdrawSets ends the waiting sets that match with result r.
func (e *Engine) withdrawSets(now int64, match func(*kset) bool, r Result, via Via) int {
	if e.sets.setsEmpty() {
		return 0
	}
	n := 0
	for _, ks := range e.sets.list(match) {
		var d *[]delivery
		locks := ks.locks[:ks.nl]
		e.lockSet(locks)
		ok := !ks.done
		if ok {
			ks.out = SetOutcome{Result: r, N: ks.n}
			d = e.withdrawSetLocked(now, ks, d)
			n++
		}
		e.unlockSet(locks)
		deliver(d, via)
		if ok && ks.sink != nil {
			ks.sink.DeliverSet(&ks.out)
		}
		e.sets.release(ks)
	}
	return n
}

func (r *setRegistry) setsEmpty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n == 0
}

// CancelSet withdraws owner's waiting set whose first key is key, for a
// client that gave up on it: its SetSink hears Canceled. It reports false
// when there is none (already granted, timed out, or never queued).
func (e *Engine) CancelSet(now int64, key []byte, owner OwnerID) bool {
	n := e.withdrawSets(now, func(ks *kset) bool {
		return ks.owner == owner && ks.keys[0] == string(key)
	}, Canceled, nil)
	e.settleSets(now, nil)
	return n > 0
}

// ReleaseSet releases each keys[i] held with toks[i] and returns the
// first error (ErrNotHolder); the keys it could release are released.
func (e *Engine) ReleaseSet(now int64, keys [][]byte, toks []fence.Token, via Via) error {
	if len(keys) != len(toks) || len(keys) == 0 {
		return ErrBadRequest
	}
	var first error
	for i, k := range keys {
		if err := e.shardFor(k).release(now, k, toks[i], via); err != nil && first == nil {
			first = err
		}
	}
	e.settleSets(now, via)
	return first
}

// RenewSet renews each keys[i] held with toks[i] as RenewAs does and
// returns the lease length, or the first error; the keys it could renew
// are renewed.
func (e *Engine) RenewSet(now int64, keys [][]byte, toks []fence.Token, ttl time.Duration, owner OwnerID) (time.Duration, error) {
	if len(keys) != len(toks) || len(keys) == 0 || ttl < 0 {
		return 0, ErrBadRequest
	}
	var first error
	var got time.Duration
	for i, k := range keys {
		t, err := e.shardFor(k).renew(now, k, toks[i], ttl, owner)
		if err != nil && first == nil {
			first = err
		}
		if err == nil && got == 0 {
			got = t
		}
	}
	e.settleSets(now, nil)
	return got, first
}

// String prints o with its tokens (fmt prints a nested *SetOutcome with
// it, not as an address, so two replicas' replies print alike).
func (o *SetOutcome) String() string {
	if o == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{Result:%v N:%d Tokens:%v TTL:%v}", o.Result, o.N, o.Tokens[:o.N], o.TTL)
}
