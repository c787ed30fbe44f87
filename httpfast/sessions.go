package httpfast

import (
	crand "crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/engine"
)

// sessionBit marks HTTP session owner IDs. TCP connections count up from
// 1 and never reach it, so the two kinds of owner never collide.
const sessionBit = engine.OwnerID(1) << 63

// sessionIDLen is the length of a session_id: 128 random bits in hex.
const sessionIDLen = 32

// minSweep is the registry size below which no sweep runs.
const minSweep = 64

// registry maps session_id strings to engine owners. The engine owns a
// session's life (its TTL and expiry); the registry only names it, and
// forgets names whose session the engine has dropped: at once when a
// request finds the session gone, and in a sweep when the map has doubled
// since the last one, so it never holds more than about twice the live
// sessions.
type registry struct {
	mu     sync.Mutex
	ids    map[string]engine.OwnerID
	next   atomic.Uint64 // last owner counter issued
	sweepN int           // size at which the next sweep runs
}

func (r *registry) init() {
	r.ids = make(map[string]engine.OwnerID)
	r.sweepN = minSweep
}

// create opens a session in eng and names it.
func (r *registry) create(eng *engine.Engine, now int64, ttl time.Duration) (string, engine.OwnerID, error) {
	var raw [sessionIDLen / 2]byte
	_, _ = crand.Read(raw[:]) // crypto/rand.Read never fails (Go 1.24+)
	id := hex.EncodeToString(raw[:])

	// Open before naming: a sweep running between the two would forget a
	// name whose session the engine does not know yet.
	owner := sessionBit | engine.OwnerID(r.next.Add(1))
	if err := eng.OpenSession(now, owner, ttl); err != nil {
		return "", 0, err
	}
	r.mu.Lock()
	if len(r.ids) >= r.sweepN {
		r.sweepLocked(eng)
	}
	r.ids[id] = owner
	r.mu.Unlock()
	return id, owner, nil
}

// sweepLocked forgets every name whose session the engine no longer has.
// It takes the engine's session mutex once per name, never the other way
// round, so the two locks cannot deadlock.
func (r *registry) sweepLocked(eng *engine.Engine) {
	for id, owner := range r.ids {
		if _, ok := eng.SessionTTL(owner); !ok {
			delete(r.ids, id)
		}
	}
	r.sweepN = max(minSweep, 2*len(r.ids))
}

// lookup returns the owner named id.
func (r *registry) lookup(id []byte) (engine.OwnerID, bool) {
	if len(id) != sessionIDLen {
		return 0, false
	}
	r.mu.Lock()
	owner, ok := r.ids[string(id)] // no copy: map index with string(b)
	r.mu.Unlock()
	return owner, ok
}

// remove forgets id and returns the owner it named.
func (r *registry) remove(id string) (engine.OwnerID, bool) {
	r.mu.Lock()
	owner, ok := r.ids[id]
	delete(r.ids, id)
	r.mu.Unlock()
	return owner, ok
}

// drain forgets every name and returns the owners.
func (r *registry) drain() []engine.OwnerID {
	r.mu.Lock()
	owners := make([]engine.OwnerID, 0, len(r.ids))
	for id, owner := range r.ids {
		owners = append(owners, owner)
		delete(r.ids, id)
	}
	r.mu.Unlock()
	return owners
}

func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}
