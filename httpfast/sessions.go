package httpfast

import (
	crand "crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
)

// sessionBit marks HTTP session owner IDs; TCP connections count up from
// 1 and never reach it. In cluster mode they are sessionBit | prefix<<32 |
// counter, with a random 31-bit prefix drawn at start and every 2^32-1
// sessions (docs/design/replication.md#owner-ids).
const sessionBit = engine.OwnerID(1) << 63

// sessionIDLen is the length of a session_id: the owner ID and the
// session's random key, 64 bits each, in hex. The engine keeps the key,
// so a new leader accepts an id it never issued.
const sessionIDLen = 32

// sweepPerCreate is how many names each create checks against the
// engine: two, so that sweeping outruns creating without a full scan.
const sweepPerCreate = 2

// errMaxSessionsPerIP refuses a session to a client IP at its cap
// (Config.MaxSessionsPerIP).
var errMaxSessionsPerIP = errors.New("httpfast: max sessions per IP reached")

// registry maps session_id strings to engine owners. The engine owns a
// session's life; the registry forgets a name when a request finds its
// session gone, or when the round-robin sweep of each create does.
type registry struct {
	mu      sync.Mutex
	ids     map[string]int // session_id -> index in names
	names   []regName
	cursor  int                                // the next name the sweep checks
	byIP    map[netip.Addr]map[string]struct{} // names of the sessions each client IP opened here
	opening map[netip.Addr]int                 // creates in flight per IP, counted against its cap

	// Owner IDs (see sessionBit); only cluster mode has a prefix.
	prefixed bool
	ownerMu  sync.Mutex
	prefix   uint64 // 31 bits
	count    uint64 // last counter issued (under prefix); cluster mode draws one at 0
}

type regName struct {
	id    string
	owner engine.OwnerID
	ip    netip.Addr // who opened it here; the zero Addr for an adopted name
}

// init readies the registry; prefixed (cluster mode) makes owner IDs
// carry a per-process random prefix.
func (r *registry) init(prefixed bool) {
	r.ids = make(map[string]int)
	r.byIP = make(map[netip.Addr]map[string]struct{})
	r.opening = make(map[netip.Addr]int)
	r.prefixed = prefixed
}

// newOwner returns a session owner ID never issued before by this process.
func (r *registry) newOwner() engine.OwnerID {
	r.ownerMu.Lock()
	defer r.ownerMu.Unlock()
	if r.prefixed && (r.count == 0 || r.count == math.MaxUint32) {
		r.prefix = clock.Salt() & 0x7fff_ffff
		r.count = 0
	}
	r.count++
	return sessionBit | engine.OwnerID(r.prefix<<32|r.count)
}

// create opens a session for client ip through b, within max open
// sessions (0: no cap) and perIP sessions opened by ip (0: no cap), and
// names it. At a cap it returns engine.ErrMaxSessions or
// errMaxSessionsPerIP.
func (r *registry) create(b backend.Backend, ttl time.Duration, max int, ip netip.Addr, perIP int) (string, engine.OwnerID, error) {
	if perIP > 0 && ip.IsValid() {
		r.mu.Lock()
		if r.ipFullLocked(b.Engine(), ip, perIP) {
			r.mu.Unlock()
			return "", 0, errMaxSessionsPerIP
		}
		r.opening[ip]++ // reserved: concurrent creates cannot overshoot
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			if r.opening[ip]--; r.opening[ip] <= 0 {
				delete(r.opening, ip)
			}
			r.mu.Unlock()
		}()
	} else {
		ip = netip.Addr{}
	}
	// Open before naming: a sweep between the two would forget the name.
	owner := r.newOwner()
	var key uint64
	for key == 0 { // 0 is "no key"
		var raw [8]byte
		_, _ = crand.Read(raw[:]) // crypto/rand.Read never fails (Go 1.24+)
		key = binary.BigEndian.Uint64(raw[:])
	}
	r0 := backend.Request{Op: backend.OpOpenSession, Owner: owner, TTL: ttl, MaxSessions: max, SessionKey: key}
	if _, err := b.Do(r0, nil); err != nil {
		return "", 0, err
	}
	id := fmt.Sprintf("%016x%016x", uint64(owner), key)

	r.mu.Lock()
	r.sweepLocked(b.Engine())
	r.ids[id] = len(r.names)
	r.names = append(r.names, regName{id: id, owner: owner, ip: ip})
	if ip.IsValid() {
		set := r.byIP[ip]
		if set == nil {
			set = make(map[string]struct{})
			r.byIP[ip] = set
		}
		set[id] = struct{}{}
	}
	r.mu.Unlock()
	return id, owner, nil
}

// ipFullLocked reports whether ip has max sessions open (or being
// opened). Names are forgotten lazily, so at the cap it first forgets
// ip's ended ones.
func (r *registry) ipFullLocked(eng *engine.Engine, ip netip.Addr, max int) bool {
	if len(r.byIP[ip])+r.opening[ip] < max {
		return false
	}
	for id := range r.byIP[ip] {
		i := r.ids[id]
		if _, ok := eng.SessionTTL(r.names[i].owner); !ok {
			delete(r.ids, id)
			r.removeAtLocked(i)
		}
	}
	return len(r.byIP[ip])+r.opening[ip] >= max
}

// sweepLocked checks the next sweepPerCreate names and forgets those
// whose session the engine no longer has (taking the engine's mutex under
// r.mu, never the other way round).
func (r *registry) sweepLocked(eng *engine.Engine) {
	for range sweepPerCreate {
		if len(r.names) == 0 {
			return
		}
		if r.cursor >= len(r.names) {
			r.cursor = 0
		}
		n := r.names[r.cursor]
		if _, ok := eng.SessionTTL(n.owner); ok {
			r.cursor++
			continue
		}
		delete(r.ids, n.id)
		r.removeAtLocked(r.cursor) // the last name moves here: checked next
	}
}

// removeAtLocked drops names[i], moving the last name into its place.
func (r *registry) removeAtLocked(i int) {
	if n := r.names[i]; n.ip.IsValid() {
		if set := r.byIP[n.ip]; set != nil {
			delete(set, n.id)
			if len(set) == 0 {
				delete(r.byIP, n.ip)
			}
		}
	}
	last := len(r.names) - 1
	if i != last {
		r.names[i] = r.names[last]
		r.ids[r.names[i].id] = i
	}
	r.names[last] = regName{}
	r.names = r.names[:last]
	if c := cap(r.names); c > 64 && last < c/4 {
		r.names = append(make([]regName, 0, c/2), r.names...) // give a burst's array back
	}
}

// lookup returns the owner named id. An id this process never issued (or
// has forgotten) is taken, and named from then on, when eng has its
// owner's session with its key.
func (r *registry) lookup(eng *engine.Engine, id []byte) (engine.OwnerID, bool) {
	if len(id) != sessionIDLen {
		return 0, false
	}
	r.mu.Lock()
	i, ok := r.ids[string(id)] // no copy: map index with string(b)
	var owner engine.OwnerID
	if ok {
		owner = r.names[i].owner
	}
	r.mu.Unlock()
	if ok {
		return owner, true
	}
	return r.adopt(eng, id)
}

// adopt names id if it carries the key of its owner's session in eng.
func (r *registry) adopt(eng *engine.Engine, id []byte) (engine.OwnerID, bool) {
	var raw [sessionIDLen / 2]byte
	if _, err := hex.Decode(raw[:], id); err != nil {
		return 0, false
	}
	owner := engine.OwnerID(binary.BigEndian.Uint64(raw[:8]))
	if owner&sessionBit == 0 {
		return 0, false
	}
	key, ok := eng.SessionKey(owner)
	var want [8]byte
	binary.BigEndian.PutUint64(want[:], key)
	if !ok || key == 0 || subtle.ConstantTimeCompare(want[:], raw[8:]) != 1 {
		return 0, false
	}
	s := string(id)
	r.mu.Lock()
	if _, named := r.ids[s]; !named {
		r.sweepLocked(eng)
		r.ids[s] = len(r.names)
		r.names = append(r.names, regName{id: s, owner: owner})
	}
	r.mu.Unlock()
	return owner, true
}

// remove forgets id and returns the owner it named.
func (r *registry) remove(id string) (engine.OwnerID, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.ids[id]
	if !ok {
		return 0, false
	}
	owner := r.names[i].owner
	delete(r.ids, id)
	r.removeAtLocked(i)
	return owner, true
}

// drain forgets every name and returns the owners.
func (r *registry) drain() []engine.OwnerID {
	r.mu.Lock()
	owners := make([]engine.OwnerID, 0, len(r.names))
	for _, n := range r.names {
		owners = append(owners, n.owner)
	}
	clear(r.ids)
	clear(r.byIP)
	r.names, r.cursor = nil, 0
	r.mu.Unlock()
	return owners
}

func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.names)
}
