package engine

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sessionScanEvery is how often Expire looks for idle sessions: a session
// lives at least its TTL and at most one scan interval more.
const sessionScanEvery = int64(time.Second)

// session is a REST owner kept alive by requests.
type session struct {
	ttl      time.Duration
	lastSeen int64
	busy     int // requests in flight; a busy session never expires
}

// sessions are owners with an idle TTL, for callers that cannot hold a
// connection open. They share one mutex: they are touched once per HTTP
// request, far less often than shards.
type sessions struct {
	mu       sync.Mutex
	m        map[OwnerID]*session
	lastScan int64
	next     atomic.Int64 // when Expire should scan next
}

func (ss *sessions) init() {
	ss.m = make(map[OwnerID]*session)
	ss.next.Store(math.MaxInt64)
}

func (ss *sessions) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.m)
}

// OpenSession registers owner as a session that ends ttl after its last
// request. Reopening an open session resets it.
func (e *Engine) OpenSession(now int64, owner OwnerID, ttl time.Duration) error {
	if ttl <= 0 {
		return ErrBadRequest
	}
	ss := &e.sess
	ss.mu.Lock()
	ss.m[owner] = &session{ttl: ttl, lastSeen: now}
	if ss.lastScan == 0 {
		ss.lastScan = now
	}
	ss.next.Store(ss.lastScan + sessionScanEvery)
	ss.mu.Unlock()
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
	s.busy++
	s.lastSeen = now
	return true
}

// EndSession ends a request begun with BeginSession; the idle TTL restarts.
func (e *Engine) EndSession(now int64, owner OwnerID) {
	ss := &e.sess
	ss.mu.Lock()
	if s := ss.m[owner]; s != nil {
		s.busy--
		s.lastSeen = now
	}
	ss.mu.Unlock()
}

// SessionTTL returns owner's idle TTL, and false if it has no session.
func (e *Engine) SessionTTL(owner OwnerID) (time.Duration, bool) {
	ss := &e.sess
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.m[owner]; s != nil {
		return s.ttl, true
	}
	return 0, false
}

// CloseSession ends owner's session and drops everything it held, as a
// disconnect does. It reports false if there was no such session.
func (e *Engine) CloseSession(now int64, owner OwnerID) bool {
	ss := &e.sess
	ss.mu.Lock()
	_, ok := ss.m[owner]
	delete(ss.m, owner)
	ss.mu.Unlock()
	if ok {
		e.DropOwner(now, owner)
	}
	return ok
}

// expireSessions drops sessions idle for longer than their TTL, in owner
// order so that replicas agree. It scans once per sessionScanEvery.
func (e *Engine) expireSessions(now int64) {
	ss := &e.sess
	if ss.next.Load() > now {
		return
	}
	var dead []OwnerID
	ss.mu.Lock()
	for id, s := range ss.m {
		if s.busy == 0 && s.lastSeen+int64(s.ttl) <= now {
			delete(ss.m, id)
			dead = append(dead, id)
		}
	}
	ss.lastScan = now
	if len(ss.m) == 0 {
		ss.next.Store(math.MaxInt64)
	} else {
		ss.next.Store(now + sessionScanEvery)
	}
	ss.mu.Unlock()
	slices.Sort(dead)
	for _, id := range dead {
		e.DropOwner(now, id)
	}
}
