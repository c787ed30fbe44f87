package engine

import (
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/latchd/latchd/stats"
)

// all lists the counters a shard keeps in the state format's order;
// Delays is not state.
func (c *Counters) all() [7]*uint64 {
	return [...]*uint64{&c.Grants, &c.Releases, &c.Renewals, &c.Timeouts, &c.Expiries, &c.Dropped, &c.Pruned}
}

// Counters are the engine's running totals since it started. Each shard
// keeps its own under its lock.
type Counters struct {
	Grants   uint64 // slots granted, at once or to a waiter
	Releases uint64 // slots given back with a token
	Renewals uint64 // leases renewed
	Timeouts uint64 // waits that ended without a grant, try-locks included
	Expiries uint64 // leases that ran out
	Dropped  uint64 // slots released because their owner went away
	Pruned   uint64 // idle keys removed: garbage-collected or evicted
	Delays   uint64 // slots held back by a lock-delay (counted by each replica)
}

// Gauges are the engine's current sizes.
type Gauges struct {
	Keys     int // keys in memory, idle ones included
	Held     int // slots held
	Waiting  int // requests in queues
	Sessions int // open REST sessions
	Delayed  int // slots held back by a lock-delay now
}

// Metrics returns the counters and gauges, locking each shard briefly in
// turn: O(shards), whatever the number of keys.
func (e *Engine) Metrics() (Counters, Gauges) {
	var c Counters
	var g Gauges
	total := c.all()
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		for j, p := range s.ctr.all() {
			*total[j] += *p
		}
		c.Delays += s.ctr.Delays
		g.Delayed += len(s.delays.slots)
		g.Keys += len(s.res)
		g.Held += s.held
		g.Waiting += s.waiting
		s.mu.Unlock()
	}
	g.Sessions = e.Sessions()
	return c, g
}

// Rough heap bytes per engine object, for HeapEstimate: the structs
// themselves plus, for a key, its map slot and a short name.
const (
	entryHeapBytes = int64(unsafe.Sizeof(entry{}))
	resourceBytes  = int64(unsafe.Sizeof(resource{})) + 48
	sessionBytes   = int64(unsafe.Sizeof(session{})) + 16
)

// HeapEstimate returns roughly how many heap bytes the engine's keys,
// holdings, waits and sessions take now, from the gauges (O(shards)): a
// fall of many megabytes means that much became garbage, which
// internal/memtrim hands back to the runtime.
func (e *Engine) HeapEstimate() int64 {
	_, g := e.Metrics()
	return int64(g.Held+g.Waiting)*entryHeapBytes + int64(g.Keys)*resourceBytes + int64(g.Sessions)*sessionBytes
}

// Refusals returns how many requests this engine refused at
// Config.MaxKeys (no idle key to evict) and at Config.MaxWaiters since it
// started. They are not engine state: each replica counts what it applied.
func (e *Engine) Refusals() (maxKeys, maxWaiters uint64) {
	return e.refusedKeys.Load(), e.refusedWaiters.Load()
}

// OwnerRefusals returns how many requests this engine refused at
// Config.MaxKeysPerOwner since it started (not engine state either).
func (e *Engine) OwnerRefusals() uint64 { return e.refusedOwner.Load() }

// The stats command's report, defined in package stats for the client too.
type (
	// LockStat describes a held lock (a key with limit 1).
	LockStat = stats.Lock
	// SemaphoreStat describes a semaphore (a key with limit > 1) in use.
	SemaphoreStat = stats.Semaphore
	// RWLockStat describes a read-write key in use.
	RWLockStat = stats.RWLock
	// IdleStat describes a key with no holder and no waiter, kept until GC.
	IdleStat = stats.Idle
	// DelayedStat describes a slot held back by a lock-delay.
	DelayedStat = stats.Delayed
	// Stats is the engine's state as the stats command reports it, sorted
	// by key. Connections is filled in by the caller.
	Stats = stats.Report
	// StatsTotals counts every entry of each list of a truncated Stats.
	StatsTotals = stats.Totals
)

// Snapshot returns the state at now. It copies under each shard's lock in
// turn, so it is consistent per shard, not across shards.
func (e *Engine) Snapshot(now int64) Stats {
	return e.SnapshotMax(now, 0)
}

// listOf sorts a key into the Stats list it belongs in.
func listOf(r *resource) int {
	switch {
	case r.empty() && (r.limit == 1 || r.limit == rwLimit):
		return idleLockList
	case r.limit == rwLimit:
		return rwList
	case r.empty():
		return idleSemList
	case r.limit == 1:
		return lockList
	}
	return semList
}

// The Stats lists, and the rough JSON size of one entry of each without
// its key, for SnapshotMax (a lock writes owner_conn_id twice: as a
// number and as a string).
const (
	lockList = iota
	semList
	idleLockList
	idleSemList
	rwList
)

var listEntryBytes = [...]int{lockList: 125, semList: 60, idleLockList: 30, idleSemList: 30, rwList: 90}

// SnapshotMax is Snapshot with its cost bounded: once the entries taken
// would encode to about maxBytes of JSON (keys unescaped), it stops
// copying them and only counts the rest, and the result is Truncated with
// Totals. The entries kept are the ones met first in shard order, sorted
// by key. maxBytes <= 0 means no bound.
func (e *Engine) SnapshotMax(now int64, maxBytes int) Stats {
	var left [5]int // entries counted, not copied, per list
	size, full := 0, false
	st := Stats{
		Locks:          []LockStat{},
		Semaphores:     []SemaphoreStat{},
		IdleLocks:      []IdleStat{},
		IdleSemaphores: []IdleStat{},
	}
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		for _, r := range s.res {
			list := listOf(r)
			if maxBytes > 0 && !full {
				size += len(r.key) + listEntryBytes[list]
				full = size > maxBytes
			}
			if full {
				left[list]++
				continue
			}
			switch list {
			case idleLockList:
				st.IdleLocks = append(st.IdleLocks, IdleStat{Key: r.key, IdleS: seconds(now - r.idleAt)})
			case idleSemList:
				st.IdleSemaphores = append(st.IdleSemaphores, IdleStat{Key: r.key, IdleS: seconds(now - r.idleAt)})
			case lockList:
				if r.holders.head == nil && r.reserved > 0 { // held back: listed in Delayed
					continue
				}
				st.Locks = append(st.Locks, lockStat(now, r))
			case rwList:
				st.RWLocks = append(st.RWLocks, r.rwStat())
			default:
				st.Semaphores = append(st.Semaphores, SemaphoreStat{Key: r.key, Limit: r.limit,
					Holders: r.holders.n, Waiters: r.waiters.n})
			}
		}
		st.Delayed = s.appendDelayedLocked(st.Delayed, now)
		s.mu.Unlock()
	}
	if full {
		st.Truncated, st.Totals = true, &StatsTotals{
			Locks:          left[lockList] + len(st.Locks),
			Semaphores:     left[semList] + len(st.Semaphores),
			IdleLocks:      left[idleLockList] + len(st.IdleLocks),
			IdleSemaphores: left[idleSemList] + len(st.IdleSemaphores),
			RWLocks:        left[rwList] + len(st.RWLocks),
		}
	}
	slices.SortFunc(st.Locks, func(a, b LockStat) int { return strings.Compare(a.Key, b.Key) })
	slices.SortFunc(st.Semaphores, func(a, b SemaphoreStat) int { return strings.Compare(a.Key, b.Key) })
	slices.SortFunc(st.IdleLocks, func(a, b IdleStat) int { return strings.Compare(a.Key, b.Key) })
	slices.SortFunc(st.IdleSemaphores, func(a, b IdleStat) int { return strings.Compare(a.Key, b.Key) })
	slices.SortFunc(st.RWLocks, func(a, b RWLockStat) int { return strings.Compare(a.Key, b.Key) })
	slices.SortStableFunc(st.Delayed, func(a, b DelayedStat) int { return strings.Compare(a.Key, b.Key) })
	return st
}

// seconds converts nanoseconds to seconds rounded to milliseconds.
func seconds(ns int64) float64 {
	return float64(ns/int64(time.Millisecond)) / 1000
}

// lockStat is a busy lock's line. A lock can have waiters and no holder:
// a set of keys (AcquireSet) at the head of its queue waits for its other
// keys; then the owner is 0 and the lease time 0.
func lockStat(now int64, r *resource) LockStat {
	ls := LockStat{Key: r.key, OwnerConnIDStr: "0", Waiters: r.waiters.n}
	if h := r.holders.head; h != nil {
		ls.OwnerConnID, ls.LeaseExpiresInS = uint64(h.owner), seconds(h.deadline-now)
		ls.OwnerConnIDStr = strconv.FormatUint(uint64(h.owner), 10)
	}
	return ls
}
