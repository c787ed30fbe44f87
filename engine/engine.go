package engine

import (
	"cmp"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/fence"
)

// OwnerID names who holds or waits: a TCP connection or an HTTP session.
type OwnerID uint64

// Result is the outcome of a request that did not fail.
type Result uint8

// Results. Granted carries a token; Queued means the Sink will hear the
// final Result later; TimedOut means the wait ended (or a try-lock found the
// key busy); Canceled means the owner was dropped while it waited;
// Drained means Drain withdrew the wait because the server is stopping.
const (
	Granted Result = iota + 1
	Queued
	TimedOut
	Canceled
	Drained
)

// String names the result.
func (r Result) String() string {
	switch r {
	case Granted:
		return "granted"
	case Queued:
		return "queued"
	case TimedOut:
		return "timed_out"
	case Canceled:
		return "canceled"
	case Drained:
		return "drained"
	}
	return "invalid"
}

// Outcome is what a request (or, later, its Sink) hears.
type Outcome struct {
	Result Result
	Token  fence.Token   // Granted only
	TTL    time.Duration // Granted only: the lease length
}

// Sink receives exactly one Outcome per request that was answered Queued.
// Deliver runs outside all engine locks on whichever goroutine produced the
// outcome; it must not block and must not call back into the engine.
type Sink interface{ Deliver(Outcome) }

// Config sets an engine's limits. Build it from DefaultConfig.
type Config struct {
	// Shards is the number of independent shards; a power of two.
	Shards int
	// MaxKeys caps the number of keys held in memory (held, waited on or
	// idle); 0 means no cap. At the cap a new key evicts the shard's
	// oldest idle key, else an idle key of another shard, and is refused
	// with ErrMaxKeys only when no key is idle.
	MaxKeys int
	// MaxWaiters caps each key's queue; 0 means no cap.
	MaxWaiters int
	// MaxKeysPerOwner caps the entries one owner (a connection, a
	// session) holds or waits on at once, over all keys; 0 means no cap.
	// A request past it is refused with ErrOwnerMaxKeys, so that one
	// client cannot take every key of MaxKeys. Like every field it must be
	// the same on all replicas of a log.
	MaxKeysPerOwner int
	// DefaultTTL is the lease a request gets when it names none.
	DefaultTTL time.Duration
	// GCMaxIdle is how long a key with no holder and no waiter is kept.
	GCMaxIdle time.Duration
	// FenceSeed is the last fence number issued before this engine; the
	// first grant gets FenceSeed+1.
	FenceSeed uint64
	// FenceLimit, when > 0, is the highest fence number the engine may
	// issue before it asks FenceReserve for more. A durable fence journal
	// sets both, so no number is issued that the journal has not reserved.
	FenceLimit uint64
	// FenceReserve is called, on the granting goroutine and under a shard
	// lock, when a grant needs a fence above the limit; it must make
	// numbers up to at least need durable and return the new limit. A
	// journal normally raises the limit ahead of use with RaiseFenceLimit,
	// so this path is rare.
	FenceReserve func(need uint64) uint64
	// LockDelay holds a slot back for this long after its holder lost it
	// involuntarily (lease expiry, or its owner went away) before it is
	// granted again; 0 grants it at once. A request may choose its own
	// (AcquireReq.LockDelay). Like every field it must be the same on all
	// replicas of a log.
	LockDelay time.Duration
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Shards:          64,
		MaxKeys:         1024,
		MaxKeysPerOwner: 256,
		DefaultTTL:      33 * time.Second,
		GCMaxIdle:       60 * time.Second,
	}
}

// Validate reports the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Shards < 1 || c.Shards&(c.Shards-1) != 0:
		return fmt.Errorf("engine: shards must be a power of two, got %d", c.Shards)
	case c.MaxKeys < 0:
		return fmt.Errorf("engine: max keys must be >= 0, got %d", c.MaxKeys)
	case c.MaxWaiters < 0:
		return fmt.Errorf("engine: max waiters must be >= 0, got %d", c.MaxWaiters)
	case c.MaxKeysPerOwner < 0 || c.MaxKeysPerOwner > math.MaxInt32:
		return fmt.Errorf("engine: max keys per owner must be in [0, %d], got %d", math.MaxInt32, c.MaxKeysPerOwner)
	case c.DefaultTTL <= 0:
		return fmt.Errorf("engine: default TTL must be > 0, got %v", c.DefaultTTL)
	case c.LockDelay < 0:
		return fmt.Errorf("engine: lock delay must be >= 0, got %v", c.LockDelay)
	case c.GCMaxIdle < 0:
		return fmt.Errorf("engine: GC max idle must be >= 0, got %v", c.GCMaxIdle)
	case c.FenceLimit > 0 && (c.FenceReserve == nil || c.FenceLimit < c.FenceSeed):
		return fmt.Errorf("engine: a fence limit needs a reserve function and must be >= the seed")
	}
	return nil
}

// Engine is the lock state machine. Its methods are safe for concurrent use.
type Engine struct {
	cfg    Config
	mask   uint64
	shards []shard
	fence  atomic.Uint64 // last fence number issued
	limit  atomic.Uint64 // highest fence number reserved; see Config.FenceLimit
	resMu  sync.Mutex    // serialises FenceReserve calls
	keys   atomic.Int64  // keys in memory, for MaxKeys
	sess   sessions
	own    ownerCounts // per-owner entries, for MaxKeysPerOwner
	sets   setRegistry // waiting sets of keys (AcquireSet)

	// Requests refused at MaxKeys, MaxWaiters and MaxKeysPerOwner (rare:
	// kept off the shards' counters).
	refusedKeys, refusedWaiters, refusedOwner atomic.Uint64
	// draining is set by Drain: no new holder or waiter, no hand-off.
	draining atomic.Bool
	hub      *Hub // watching (watch.go)
}

// New returns an engine with cfg, which must be valid.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, mask: uint64(cfg.Shards - 1), shards: make([]shard, cfg.Shards), hub: newHub()}
	for i := range e.shards {
		e.shards[i].init(e)
		e.shards[i].idx = i
	}
	e.fence.Store(cfg.FenceSeed)
	e.limit.Store(cfg.FenceLimit)
	if cfg.FenceLimit == 0 {
		e.limit.Store(math.MaxUint64)
	}
	e.sess.init()
	e.own.init(cfg.MaxKeysPerOwner)
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// LastFence returns the last fence number issued.
func (e *Engine) LastFence() uint64 { return e.fence.Load() }

// RaiseFence makes every fence number issued from now on greater than
// floor: it moves the last issued number up to floor when it is below,
// and never down. A replicated engine calls it from the log (a new
// leader's clock), so every replica raises alike.
func (e *Engine) RaiseFence(floor uint64) { raiseTo(&e.fence, floor) }

// FenceLimit returns the highest fence number the engine may issue now.
func (e *Engine) FenceLimit() uint64 { return e.limit.Load() }

// RaiseFenceLimit lets the engine issue fence numbers up to limit, which
// the caller has made durable. A lower limit than the current is ignored.
func (e *Engine) RaiseFenceLimit(limit uint64) { raiseTo(&e.limit, limit) }

// raiseTo moves a up to v when it is below, and never down.
func raiseTo(a *atomic.Uint64, v uint64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// nextFence issues the next fence number, reserving more first when the
// limit is reached.
func (e *Engine) nextFence() uint64 {
	f := e.fence.Add(1)
	if f > e.limit.Load() {
		e.resMu.Lock()
		if f > e.limit.Load() {
			e.RaiseFenceLimit(e.cfg.FenceReserve(f))
		}
		ok := f <= e.limit.Load()
		e.resMu.Unlock()
		if !ok {
			// Issuing a fence the journal has not made durable could hand
			// out the same number again after a crash: stop instead.
			panic("engine: FenceReserve did not reserve the fence it was asked for")
		}
	}
	return f
}

// shardFor maps a key to its shard with FNV-1a: fixed, so two engines with
// one Config place every key alike (a seeded hash would make the order in
// which DropOwner and Expire visit keys differ between replicas).
func (e *Engine) shardFor(key []byte) *shard {
	h := uint64(14695981039346656037)
	for _, c := range key {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return &e.shards[h&e.mask]
}

// AcquireReq is an acquire or a two-phase enqueue.
type AcquireReq struct {
	Key     []byte
	Owner   OwnerID
	Limit   int           // slots; 1 for a lock; ignored unless Mode is ModeSlot
	Mode    Mode          // ModeSlot, or ModeRead/ModeWrite for a read-write key
	TTL     time.Duration // lease; 0 means Config.DefaultTTL
	Timeout time.Duration // Acquire only: how long to wait; 0 = try once
	Salt    uint64        // the grant's token salt, from a CSPRNG
	// LockDelay is the lock-delay of this holding if it is lost
	// involuntarily: 0 means Config.LockDelay, < 0 none.
	LockDelay time.Duration
}

func (e *Engine) check(req *AcquireReq) error {
	if req.Mode != ModeSlot {
		if req.Mode > ModeWrite {
			return ErrBadRequest
		}
		req.Limit = rwLimit
	} else if req.Limit < 1 {
		return ErrBadRequest
	}
	if len(req.Key) == 0 || req.TTL < 0 || req.Timeout < 0 {
		return ErrBadRequest
	}
	req.TTL = cmp.Or(req.TTL, e.cfg.DefaultTTL)
	return nil
}

// Acquire takes a slot of req.Key. It answers Granted when a slot is free
// and nobody is queued, TimedOut when Timeout is 0 and it is not, and
// otherwise parks the request: Queued, and sink later hears Granted or
// TimedOut (or Canceled if the owner is dropped first).
func (e *Engine) Acquire(now int64, req AcquireReq, sink Sink) (Outcome, error) {
	return e.acquire(now, req, sink, false)
}

// Enqueue is the first phase of a two-phase acquire: it takes a slot at
// once if one is free and nobody is queued (Granted), and otherwise joins
// the queue without blocking (Queued; no Sink is called). Wait completes
// it, in both cases. An owner that already holds or waits on the key gets
// ErrAlreadyQueued.
func (e *Engine) Enqueue(now int64, req AcquireReq) (Outcome, error) {
	return e.acquire(now, req, nil, true)
}

// acquire is Acquire, or with enqueue Enqueue: a refusal at MaxKeys is
// tried again once an idle key of another shard is evicted.
func (e *Engine) acquire(now int64, req AcquireReq, sink Sink, enqueue bool) (Outcome, error) {
	if err := e.check(&req); err != nil {
		return Outcome{}, err
	}
	sh := e.shardFor(req.Key)
	out, err := sh.acquire(now, &req, sink, enqueue)
	if err == ErrMaxKeys && e.evictIdle(sh) {
		out, err = sh.acquire(now, &req, sink, enqueue)
	}
	e.countRefusal(err)
	return out, err
}

// countRefusal counts a request refused at MaxKeys or MaxWaiters.
func (e *Engine) countRefusal(err error) {
	switch err {
	case nil:
	case ErrMaxKeys:
		e.refusedKeys.Add(1)
	case ErrMaxWaiters:
		e.refusedWaiters.Add(1)
	case ErrOwnerMaxKeys:
		e.refusedOwner.Add(1)
	}
}

// evictIdle drops one idle key from a shard other than skip (whose own
// idle keys were already tried), to make room at MaxKeys. Shards are
// visited in order, one lock at a time. It reports whether it freed one.
func (e *Engine) evictIdle(skip *shard) bool {
	for i := range e.shards {
		s := &e.shards[i]
		if s == skip {
			continue
		}
		s.mu.Lock()
		r := s.idle.head
		if r != nil {
			s.settleLocked()
			s.dropResourceLocked(r)
			s.updateNextLocked()
		}
		s.mu.Unlock()
		if r != nil {
			return true
		}
	}
	return false
}

// Wait is the second phase: if the owner's enqueued request has been
// granted, by Enqueue itself or later, it answers Granted with the same
// token and the lease restarted at now for its full TTL; otherwise it
// parks until timeout (0 = answer TimedOut at once). A wait that times out
// leaves the queue. Wait collects an Enqueue once: without one not yet
// collected, or when its grant was released first, it returns
// ErrNotQueued; when the grant's lease ran out first, ErrLeaseExpired
// (once: the next Wait returns ErrNotQueued).
func (e *Engine) Wait(now int64, key []byte, owner OwnerID, timeout time.Duration, sink Sink) (Outcome, error) {
	if timeout < 0 {
		return Outcome{}, ErrBadRequest
	}
	out, err := e.shardFor(key).wait(now, key, owner, timeout, sink)
	e.settleSets(now, nil)
	return out, err
}

// Release frees the slot of key held with tok and hands it to the oldest
// waiter. An unknown key, a wrong token or an expired lease is ErrNotHolder.
func (e *Engine) Release(now int64, key []byte, tok fence.Token) error {
	return e.ReleaseVia(now, key, tok, nil)
}

// ReleaseVia is Release with the grants it makes handed to via.
func (e *Engine) ReleaseVia(now int64, key []byte, tok fence.Token, via Via) error {
	err := e.shardFor(key).release(now, key, tok, via)
	e.settleSets(now, via)
	return err
}

// Renew restarts the lease of key held with tok at now+ttl (ttl 0: the
// lease's own TTL) and returns the lease length. An expired lease is not
// resurrected: ErrNotHolder.
func (e *Engine) Renew(now int64, key []byte, tok fence.Token, ttl time.Duration) (time.Duration, error) {
	return e.RenewAs(now, key, tok, ttl, 0)
}

// RenewAs is Renew by owner (0: nobody in particular). A lease renewed by
// an owner other than its holder moves to that owner: whoever proves the
// token last holds the lease, so the old owner's disconnect (a client's
// dead connection, closed after the client renewed on a new one) no
// longer releases it, and the new owner's does. It stays put when the new
// owner already holds or waits on the key.
func (e *Engine) RenewAs(now int64, key []byte, tok fence.Token, ttl time.Duration, owner OwnerID) (time.Duration, error) {
	if ttl < 0 {
		return 0, ErrBadRequest
	}
	got, err := e.shardFor(key).renew(now, key, tok, ttl, owner)
	e.settleSets(now, nil)
	return got, err
}

// CancelWait withdraws owner's parked request on key (an Acquire that
// queued, or a Wait that blocks), for a client that gave up on it: its
// Sink hears Canceled. It reports false when there is none, because the
// request was already answered (granted, timed out) or never parked; a
// grant that won the race is then the caller's to release. Other waits
// and holdings of the owner are untouched.
func (e *Engine) CancelWait(now int64, key []byte, owner OwnerID) bool {
	return e.shardFor(key).cancelWait(now, key, owner)
}

// DropOwner releases everything owner holds and withdraws everything it
// waits for, as on a disconnect. Parked requests of the owner hear
// Canceled. It costs one lock of each shard plus what the owner had.
func (e *Engine) DropOwner(now int64, owner OwnerID) {
	e.Disconnect(now, owner, true)
}

// Disconnect is DropOwner for a connection that went away: with release
// false the owner's leases stay until they expire or are released by
// token, and only its waits are withdrawn.
func (e *Engine) Disconnect(now int64, owner OwnerID, release bool) {
	e.DisconnectVia(now, owner, release, nil)
}

// DisconnectVia is Disconnect with the grants it makes handed to via.
func (e *Engine) DisconnectVia(now int64, owner OwnerID, release bool, via Via) {
	e.withdrawSets(now, func(ks *kset) bool { return ks.owner == owner }, Canceled, via)
	for i := range e.shards {
		e.shards[i].dropOwner(now, owner, !release, via)
	}
	e.settleSets(now, via)
}

// Drain prepares the engine for a graceful stop: from now on it grants
// nothing. Every parked request hears Drained, every two-phase enqueue is
// withdrawn, and later Acquire, Enqueue and Wait calls fail with
// ErrDraining (a Wait still collects a grant made before Drain). Releases
// and renewals keep working, so holders can finish; a slot they free is
// not handed on. It returns how many waits it withdrew. Drain is for a
// single node's engine: a replica's state changes only through its log.
func (e *Engine) Drain(now int64) int {
	e.draining.Store(true)
	n := e.withdrawSets(now, nil, Drained, nil)
	for i := range e.shards {
		n += e.shards[i].drain(now)
	}
	return n
}

// Draining reports whether Drain was called.
func (e *Engine) Draining() bool { return e.draining.Load() }

// Expire ends every lease and wait whose deadline is <= now, hands freed
// slots on, prunes idle keys and drops expired sessions. One clock
// goroutine calls it, every ~10 ms.
func (e *Engine) Expire(now int64) {
	for i := range e.shards {
		e.shards[i].expire(now)
	}
	e.settleSets(now, nil)
	e.expireSessions(now)
}

// NextDeadline returns the earliest deadline any shard waits for, or
// math.MaxInt64. A clock can sleep until then.
func (e *Engine) NextDeadline() int64 {
	next := e.sess.next.Load() // math.MaxInt64 without an idle session
	for i := range e.shards {
		next = min(next, e.shards[i].next.Load())
	}
	return next
}

// delivery is a Sink call collected under a shard lock and made after it.
type delivery struct {
	sink Sink
	out  Outcome
}

var deliveryPool = sync.Pool{New: func() any { s := make([]delivery, 0, 16); return &s }}

// Via receives the Sink calls of the engine call it is passed to, in place
// of the Sinks: Deliver(sink, out) must eventually lead to sink hearing
// out. It runs on the calling goroutine after the shard lock is released.
// A caller that knows which goroutine it is on (an event loop) can use it
// to answer sinks that live on that goroutine without waking anything.
type Via interface{ Deliver(Sink, Outcome) }

func deliver(d *[]delivery, via Via) {
	if d == nil {
		return
	}
	for i := range *d {
		if via != nil {
			via.Deliver((*d)[i].sink, (*d)[i].out)
		} else {
			(*d)[i].sink.Deliver((*d)[i].out)
		}
		(*d)[i] = delivery{}
	}
	*d = (*d)[:0]
	deliveryPool.Put(d)
}
