// Package authlimit keeps a token bucket per client IP (an IPv6 client is
// its /64, see Key): Limiter for failed authentication attempts, refused
// before their secret is compared until the bucket refills; Buckets for
// the REST API's request rate limit. Memory is bounded: the buckets live
// in two generations of maps, and when the current one fills half the
// bound the older one is dropped, forgetting the IPs least recently seen.
// Conns counts each client's open connections for the per-IP connection
// caps. Safe for concurrent use.
package authlimit

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Key is the client a per-IP limit counts ip as: an IPv4 address (also
// IPv4-mapped in IPv6) itself, an IPv6 address its /64 prefix, which one
// host usually holds whole and could rotate through past any limit. The
// zone is dropped. Every per-IP limit of latchd counts by Key.
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

// Buckets is a token bucket per IP, perSec tokens a second up to burst,
// for at most maxIPs IPs.
type Buckets struct {
	every rate.Limit
	burst int
	half  int

	mu       sync.Mutex
	cur, old map[netip.Addr]*rate.Limiter
}

// NewBuckets returns buckets refilled at perSec tokens a second and
// holding at most burst, for at most maxIPs IPs (at least 2).
func NewBuckets(perSec float64, burst, maxIPs int) *Buckets {
	half := max(1, maxIPs/2)
	return &Buckets{
		every: rate.Limit(perSec),
		burst: burst,
		half:  half,
		cur:   make(map[netip.Addr]*rate.Limiter),
		old:   make(map[netip.Addr]*rate.Limiter),
	}
}

// lookup returns ip's bucket, moving it to the current generation; with
// create it makes one when there is none. rate.Limiter has its own mutex:
// the caller uses the bucket without b.mu.
func (b *Buckets) lookup(ip netip.Addr, create bool) *rate.Limiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if lim := b.cur[ip]; lim != nil {
		return lim
	}
	lim := b.old[ip]
	if lim != nil {
		delete(b.old, ip)
	} else if !create {
		return nil
	} else {
		lim = rate.NewLimiter(b.every, b.burst)
	}
	if len(b.cur) >= b.half {
		b.old, b.cur = b.cur, make(map[netip.Addr]*rate.Limiter, b.half)
	}
	b.cur[ip] = lim
	return lim
}

// wait is how long until lim has a token, from now.
func (b *Buckets) wait(lim *rate.Limiter, now time.Time) time.Duration {
	return time.Duration((1 - lim.TokensAt(now)) / float64(b.every) * float64(time.Second))
}

// Allow takes a token of ip's bucket. When there is none it returns false
// and how long until there will be one.
func (b *Buckets) Allow(ip netip.Addr, now time.Time) (bool, time.Duration) {
	lim := b.lookup(ip, true)
	if lim.AllowN(now, 1) {
		return true, 0
	}
	return false, b.wait(lim, now)
}

// Limiter counts failed authentications per IP. IPs that never fail are
// never stored.
type Limiter struct{ b *Buckets }

// New returns a Limiter that lets each IP fail perMinute times at once and
// then perMinute times a minute (refilled evenly), remembering at most
// maxIPs IPs (DefaultMaxIPs if maxIPs <= 1). perMinute must be > 0.
func New(perMinute, maxIPs int) *Limiter {
	if maxIPs <= 1 {
		maxIPs = DefaultMaxIPs
	}
	return &Limiter{NewBuckets(float64(perMinute)/60, perMinute, maxIPs)}
}

// Blocked reports whether ip has used up its failures: its next attempt
// must be refused without checking the secret. It returns how long until
// ip may try again.
func (l *Limiter) Blocked(ip netip.Addr, now time.Time) (bool, time.Duration) {
	lim := l.b.lookup(Key(ip), false)
	if lim == nil || lim.TokensAt(now) >= 1 {
		return false, 0
	}
	return true, l.b.wait(lim, now)
}

// Failed records one failed attempt by ip.
func (l *Limiter) Failed(ip netip.Addr, now time.Time) {
	l.b.lookup(Key(ip), true).AllowN(now, 1)
}
