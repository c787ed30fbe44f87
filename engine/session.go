package engine

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sessionExpireBudget bounds the sessions one Expire call ends (each is a
// DropOwner, one lock of every shard); the rest wait for the next tick.
const sessionExpireBudget = 1024

// listWalkMax bounds how far back from the tail an idle session may be
// inserted into the list; one that belongs further back goes to the heap.
const listWalkMax = 16

// session is a REST owner kept alive by requests.
type session struct {
	owner    OwnerID
	ttl      time.Duration
	lastSeen int64
	busy     int    // requests in flight; a busy session never expires
	key      uint64 // the opener's secret, 0 for none (see OpenSessionKeyed)
	deadline int64  // lastSeen+ttl, kept while idle (busy == 0)
	hidx     int    // index in sessions.heap, or -1
	listed   bool   // on the sessions' list
	prev     *session
	next     *session
}

// sessions are owners with an idle TTL, for callers that cannot hold a
// connection open. They share one mutex, taken twice per HTTP request.
//
// Only idle sessions (no request in flight) have a deadline, ordered by
// (deadline, owner) so that Expire pops only what is due. Nearly every
// session has the REST server's TTL and the clock moves forward, so one
// going idle now is usually the latest: an intrusive list of the sessions
// of listTTL takes it at the tail in O(1). Another TTL, or a place more
// than listWalkMax back from the tail, goes to a min-heap; Expire takes
// the smaller head of the two. Ties go by owner, so the expiry order (and
// the grants the drops make) depends on the sessions alone: a restored
// engine, which rebuilds both, expires them exactly as the original.
type sessions struct {
	mu      sync.Mutex
	m       map[OwnerID]*session
	listTTL time.Duration // TTL of the listed sessions; any while the list is empty
	head    *session      // idle sessions of listTTL, earliest first
	tail    *session
	heap    sessionHeap  // the other idle sessions
	next    atomic.Int64 // earliest idle deadline, or MaxInt64; read without mu
}

func (ss *sessions) init() {
	ss.m = make(map[OwnerID]*session)
	ss.next.Store(math.MaxInt64)
}

// get returns a copy of owner's session, and false if it has none.
func (ss *sessions) get(owner OwnerID) (session, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.m[owner]; s != nil {
		return *s, true
	}
	return session{}, false
}

// sessionBefore orders idle sessions: by deadline, then owner.
func sessionBefore(a, b *session) bool {
	return a.deadline < b.deadline || (a.deadline == b.deadline && a.owner < b.owner)
}

// firstLocked returns the idle session that expires first, or nil.
func (ss *sessions) firstLocked() *session {
	s := ss.head
	if len(ss.heap) > 0 && (s == nil || sessionBefore(ss.heap[0], s)) {
		s = ss.heap[0]
	}
	return s
}

// updateNextLocked publishes the earliest session deadline.
func (ss *sessions) updateNextLocked() {
	next := int64(math.MaxInt64)
	if s := ss.firstLocked(); s != nil {
		next = s.deadline
	}
	ss.next.Store(next)
}

// idleLocked starts s's idle TTL at s.lastSeen; s is on neither the list
// nor the heap.
func (ss *sessions) idleLocked(s *session) {
	s.deadline = addSat(s.lastSeen, int64(s.ttl))
	if ss.head == nil {
		ss.listTTL = s.ttl
	}
	if s.ttl == ss.listTTL && ss.listInsert(s) {
		return
	}
	ss.heap.set(s, s.deadline)
}

// unidleLocked takes s off the list or out of the heap.
func (ss *sessions) unidleLocked(s *session) {
	switch {
	case s.listed:
		ss.listRemove(s)
	case s.hidx >= 0:
		ss.heap.remove(s)
	}
}

// listInsert puts s in its place on the list, looking back at most
// listWalkMax sessions from the tail, and reports whether it found it.
func (ss *sessions) listInsert(s *session) bool {
	p := ss.tail
	for range listWalkMax {
		if p == nil || !sessionBefore(s, p) {
			break
		}
		p = p.prev
	}
	if p != nil && sessionBefore(s, p) {
		return false
	}
	// s goes right after p (at the head when p is nil).
	s.prev = p
	if p != nil {
		s.next, p.next = p.next, s
	} else {
		s.next, ss.head = ss.head, s
	}
	if s.next != nil {
		s.next.prev = s
	} else {
		ss.tail = s
	}
	s.listed = true
	return true
}

func (ss *sessions) listRemove(s *session) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		ss.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		ss.tail = s.prev
	}
	s.prev, s.next, s.listed = nil, nil, false
}

// rebuildLocked files every idle session anew after deadlines or
// sessions changed directly; the list gets the most common TTL (the
// shortest of equals).
func (ss *sessions) rebuildLocked() {
	idle := make([]*session, 0, len(ss.m))
	ttls := make(map[time.Duration]int)
	for _, s := range ss.m {
		s.hidx, s.listed, s.prev, s.next = -1, false, nil, nil
		if s.busy == 0 {
			s.deadline = addSat(s.lastSeen, int64(s.ttl))
			idle = append(idle, s)
			ttls[s.ttl]++
		}
	}
	slices.SortFunc(idle, func(a, b *session) int {
		if sessionBefore(a, b) {
			return -1
		}
		return 1 // owners differ, so a and b are never equal
	})
	ss.head, ss.tail, ss.heap = nil, nil, ss.heap[:0]
	ss.listTTL = 0
	for ttl, n := range ttls {
		if n > ttls[ss.listTTL] || (n == ttls[ss.listTTL] && ttl < ss.listTTL) {
			ss.listTTL = ttl
		}
	}
	for _, s := range idle {
		if s.ttl == ss.listTTL {
			ss.listInsert(s) // in order: at the tail
		} else {
			ss.heap.set(s, s.deadline)
		}
	}
	ss.updateNextLocked()
}

// OpenSession registers owner as a session that ends ttl after its last
// request. Reopening an open session resets its TTL and idle clock; its
// requests in flight stay counted.
func (e *Engine) OpenSession(now int64, owner OwnerID, ttl time.Duration) error {
	return e.OpenSessionMax(now, owner, ttl, 0)
}

// OpenSessionMax is OpenSession with a cap: when max > 0 and max sessions
// are open, a new session is refused with ErrMaxSessions (reopening an
// open one is not). The check and the insert are one step.
func (e *Engine) OpenSessionMax(now int64, owner OwnerID, ttl time.Duration, max int) error {
	return e.OpenSessionKeyed(now, owner, ttl, max, 0)
}

// OpenSessionKeyed is OpenSessionMax that also keeps key, a secret of the
// opener's, with the session (a reopen with key 0 keeps the one it had).
// The REST API puts the key in its session ids so that any process with
// this engine's state (a restarted node, a new raft leader) can tell a
// session id it never issued from a forged one (SessionKey).
func (e *Engine) OpenSessionKeyed(now int64, owner OwnerID, ttl time.Duration, max int, key uint64) error {
	if ttl <= 0 || max < 0 {
		return ErrBadRequest
	}
	ss := &e.sess
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[owner]
	if s == nil {
		if max > 0 && len(ss.m) >= max {
			return ErrMaxSessions
		}
		s = &session{owner: owner, hidx: -1}
		ss.m[owner] = s
	} else {
		ss.unidleLocked(s)
	}
	s.ttl, s.lastSeen = ttl, now
	if key != 0 {
		s.key = key
	}
	if s.busy == 0 {
		ss.idleLocked(s)
	}
	ss.updateNextLocked()
	return nil
}

// BeginSession marks a request of owner in flight and keeps the session
// alive until EndSession. It reports false for an unknown or ended session.
func (e *Engine) BeginSession(now int64, owner OwnerID) bool {
	ss := &e.sess
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[owner]
	if s == nil {
		return false
	}
	if s.busy == 0 {
		ss.unidleLocked(s)
		ss.updateNextLocked()
	}
	s.busy++
	s.lastSeen = now
	return true
}

// EndSession ends a request begun with BeginSession; once none is left
// the idle TTL restarts.
func (e *Engine) EndSession(now int64, owner OwnerID) {
	ss := &e.sess
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[owner]
	if s == nil || s.busy == 0 { // no request in flight: nothing to end
		return
	}
	s.busy--
	s.lastSeen = now
	if s.busy == 0 {
		ss.idleLocked(s)
		ss.updateNextLocked()
	}
}

// SessionTTL returns owner's idle TTL, and false if it has no session.
func (e *Engine) SessionTTL(owner OwnerID) (time.Duration, bool) {
	s, ok := e.sess.get(owner)
	return s.ttl, ok
}

// IdleSessions ends every request in flight of every session, as if each
// had called EndSession, and returns how many sessions that made idle. A
// new Raft leader applies it (after ShiftDeadlines): a request begun on a
// leader that died never proposes its EndSession, and its session would
// never expire. A request parked on a deposed leader may still be
// answered there, so the idle TTL restarts at the latest of now and the
// deadlines of the owner's waits.
func (e *Engine) IdleSessions(now int64) int {
	ss := &e.sess
	from := make(map[OwnerID]int64) // busy owner -> when its idle TTL restarts
	ss.mu.Lock()
	for owner, s := range ss.m {
		if s.busy > 0 {
			from[owner] = now
		}
	}
	ss.mu.Unlock()
	if len(from) == 0 {
		return 0
	}
	// The shards' locks are never taken under ss.mu.
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for owner, t := range from {
			for en := sh.owners[owner]; en != nil; en = en.onext {
				if !en.holding && en.hidx >= 0 {
					t = max(t, en.deadline)
				}
			}
			from[owner] = t
		}
		sh.mu.Unlock()
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	n := 0
	for owner, t := range from {
		if s := ss.m[owner]; s != nil && s.busy > 0 {
			s.busy = 0
			s.lastSeen = max(s.lastSeen, t)
			n++
		}
	}
	if n > 0 {
		ss.rebuildLocked() // files every idle session; ties go by owner
	}
	return n
}

// SessionKey returns the key owner's session was opened with (0 for
// none), and false if it has no session.
func (e *Engine) SessionKey(owner OwnerID) (uint64, bool) {
	s, ok := e.sess.get(owner)
	return s.key, ok
}

// Sessions returns the number of open sessions.
func (e *Engine) Sessions() int {
	e.sess.mu.Lock()
	defer e.sess.mu.Unlock()
	return len(e.sess.m)
}

// CloseSession ends owner's session and drops everything it held, as a
// disconnect does. It reports false if there was no such session.
func (e *Engine) CloseSession(now int64, owner OwnerID) bool {
	ss := &e.sess
	ss.mu.Lock()
	s, ok := ss.m[owner]
	if ok {
		delete(ss.m, owner)
		ss.unidleLocked(s)
		ss.updateNextLocked()
	}
	ss.mu.Unlock()
	if ok {
		e.DropOwner(now, owner)
	}
	return ok
}

// expireSessions drops idle sessions whose deadline is <= now, earliest
// first, at most sessionExpireBudget per call; their owners are dropped
// after the mutex is released (a DropOwner takes shard locks).
func (e *Engine) expireSessions(now int64) {
	ss := &e.sess
	if ss.next.Load() > now {
		return
	}
	var buf [32]OwnerID
	dead := buf[:0]
	ss.mu.Lock()
	for len(dead) < sessionExpireBudget {
		s := ss.firstLocked()
		if s == nil || s.deadline > now {
			break
		}
		ss.unidleLocked(s)
		delete(ss.m, s.owner)
		dead = append(dead, s.owner)
	}
	ss.updateNextLocked()
	ss.mu.Unlock()
	for _, id := range dead {
		e.DropOwner(now, id)
	}
}

// SessionBusy returns how many requests of owner's session are in flight
// (a TCP session's connections count as requests: server/orphan.go), and
// false if it has no session.
func (e *Engine) SessionBusy(owner OwnerID) (int, bool) {
	s, ok := e.sess.get(owner)
	return s.busy, ok
}
