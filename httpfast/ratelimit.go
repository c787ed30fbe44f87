package httpfast

import (
	"math"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// ipLimiter is a token bucket per client IP, in two generations of maps:
// an IP is looked up in the current map, then in the previous one (and
// moved to the current); when the current map holds half the bound, it
// becomes the previous one and the old previous is forgotten. So at most
// max IPs are tracked, at O(1) per request, and the ones forgotten are
// those least recently seen. A forgotten IP starts again with a full
// bucket.
type ipLimiter struct {
	limit rate.Limit
	burst int
	half  int

	mu       sync.Mutex
	cur, old map[netip.Addr]*rate.Limiter
}

func newIPLimiter(perSec float64, burst, maxIPs int) *ipLimiter {
	if burst == 0 {
		burst = max(1, int(math.Ceil(perSec)))
	}
	half := max(1, maxIPs/2)
	return &ipLimiter{
		limit: rate.Limit(perSec),
		burst: burst,
		half:  half,
		cur:   make(map[netip.Addr]*rate.Limiter, half),
		old:   map[netip.Addr]*rate.Limiter{},
	}
}

// allow takes a token of ip's bucket. When there is none it returns false
// and how long until there will be one.
func (l *ipLimiter) allow(ip netip.Addr, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	lim := l.cur[ip]
	if lim == nil {
		lim = l.old[ip]
		if lim != nil {
			delete(l.old, ip)
		} else {
			lim = rate.NewLimiter(l.limit, l.burst)
		}
		if len(l.cur) >= l.half {
			l.old, l.cur = l.cur, make(map[netip.Addr]*rate.Limiter, l.half)
		}
		l.cur[ip] = lim
	}
	l.mu.Unlock()
	// rate.Limiter has its own mutex; l.mu is not held while it runs.
	if lim.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - lim.TokensAt(now)
	return false, time.Duration(missing / float64(l.limit) * float64(time.Second))
}
