// Package authlimit rate-limits failed authentication attempts per client
// IP (an IPv6 client is its /64, see Key), for the TCP server's auth command and the REST API's bearer token.
// Each IP that fails gets a token bucket; an IP whose bucket is empty is
// refused before its secret is even compared, until the bucket refills.
// Memory is bounded: the buckets live in two generations of maps, and when
// the current one fills half the bound it becomes the previous one and the
// old previous is dropped, so a flood of source addresses can never grow
// it past MaxIPs, and the IPs forgotten are the least recently failing
// (they start again with a full bucket). IPs that never fail are never
// stored. Safe for concurrent use.
package authlimit

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Key is the client a per-IP limit counts ip as: an IPv4 address (also
// IPv4-mapped in IPv6) itself, an IPv6 address its /64 prefix. One host
// or site usually holds a whole /64, so counting single IPv6 addresses
// would let it rotate through 2^64 of them past any per-IP limit (and
// flood a bounded map until the buckets it wants forgotten are evicted).
// The zone is dropped. Every per-IP limit of latchd counts by Key.
func Key(ip netip.Addr) netip.Addr {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// DefaultMaxIPs is the number of failing IPs a Limiter remembers by default.
const DefaultMaxIPs = 16384

// Limiter counts failed authentications per IP.
type Limiter struct {
	every rate.Limit
	burst int
	half  int

	mu       sync.Mutex
	cur, old map[netip.Addr]*rate.Limiter
}

// New returns a Limiter that lets each IP fail perMinute times at once and
// then perMinute times a minute (refilled evenly), remembering at most
// maxIPs IPs (DefaultMaxIPs if maxIPs <= 1). perMinute must be > 0.
func New(perMinute, maxIPs int) *Limiter {
	if maxIPs <= 1 {
		maxIPs = DefaultMaxIPs
	}
	half := maxIPs / 2
	return &Limiter{
		every: rate.Limit(float64(perMinute) / 60),
		burst: perMinute,
		half:  half,
		cur:   make(map[netip.Addr]*rate.Limiter),
		old:   make(map[netip.Addr]*rate.Limiter),
	}
}

// lookupLocked returns ip's bucket, moving it to the current generation;
// with create it makes one when there is none.
func (l *Limiter) lookupLocked(ip netip.Addr, create bool) *rate.Limiter {
	if lim := l.cur[ip]; lim != nil {
		return lim
	}
	lim := l.old[ip]
	if lim != nil {
		delete(l.old, ip)
	} else if !create {
		return nil
	} else {
		lim = rate.NewLimiter(l.every, l.burst)
	}
	if len(l.cur) >= l.half {
		l.old, l.cur = l.cur, make(map[netip.Addr]*rate.Limiter, l.half)
	}
	l.cur[ip] = lim
	return lim
}

// Blocked reports whether ip has used up its failures: its next attempt
// must be refused without checking the secret. It returns how long until
// ip may try again.
func (l *Limiter) Blocked(ip netip.Addr, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	lim := l.lookupLocked(Key(ip), false)
	l.mu.Unlock()
	if lim == nil {
		return false, 0
	}
	tokens := lim.TokensAt(now)
	if tokens >= 1 {
		return false, 0
	}
	return true, time.Duration((1 - tokens) / float64(l.every) * float64(time.Second))
}

// Failed records one failed attempt by ip.
func (l *Limiter) Failed(ip netip.Addr, now time.Time) {
	l.mu.Lock()
	lim := l.lookupLocked(Key(ip), true)
	l.mu.Unlock()
	lim.AllowN(now, 1) // rate.Limiter has its own mutex
}
