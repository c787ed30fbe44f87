package httpfast

import (
	"crypto/tls"
	"fmt"
	"math"
	"time"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/internal/budget"
	"github.com/latchd/latchd/internal/listen"
	"github.com/latchd/latchd/internal/metrics"
)

// Config sets the REST server up. Build it from DefaultConfig.
type Config struct {
	// Addr is the listen address, host:port; port 0 picks a free one.
	Addr string
	// SessionTTL is how long a session lives without a request.
	SessionTTL time.Duration
	// MaxSessions caps the open sessions: past it POST /v1/sessions
	// answers 429 max_sessions. 0 means no cap.
	MaxSessions int
	// MaxSessionsPerIP caps the sessions one client IP opened on this
	// server; past it: 429 max_sessions. 0 means no cap.
	MaxSessionsPerIP int
	// MaxConnectionsPerIP caps the open REST connections from one client
	// (an IPv6 client is its /64); past it a connection gets 429 and is
	// closed. 0 means no cap.
	MaxConnectionsPerIP int
	// AuthFailuresPerMinute is how many bad bearer tokens a client IP may
	// send at once, then per minute (past it: 429); 0 turns it off.
	AuthFailuresPerMinute int
	// AuthToken, when set, must come with every request as
	// "Authorization: Bearer <token>" (/healthz, /readyz,
	// /v1/openapi.json and the dashboard's files are exempt).
	AuthToken string
	// RateLimitPerIP is each client IP's sustained request rate in
	// requests per second; 0 turns rate limiting off.
	RateLimitPerIP float64
	// RateLimitBurst is how many requests an IP may make at once; 0 means
	// max(1, ceil(RateLimitPerIP)).
	RateLimitBurst int
	// RateLimitMaxIPs bounds the number of IPs tracked; the least recently
	// seen half is forgotten when it fills.
	RateLimitMaxIPs int
	// MaxBodyBytes caps a request body; a bigger one gets 413.
	MaxBodyBytes int
	// DefaultTTL is the lease a request gets when it names no lease_ttl_s;
	// 0 means the engine's default.
	DefaultTTL time.Duration
	// ReadTimeout bounds reading one request, and the idle time of a
	// keep-alive connection between requests.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response: a client that stops
	// reading is closed after it. 0 turns it off.
	WriteTimeout time.Duration
	// MaxStatsBytes caps the JSON of GET /v1/stats; a bigger state
	// answers a truncated list with "truncated": true and the totals.
	MaxStatsBytes int
	// StatsConcurrency bounds the stats answers being built at once.
	StatsConcurrency int
	// MaxOutput is the budget of unwritten stats bodies without
	// WithOutputBudget; 0 means none. Past it /v1/stats answers totals.
	MaxOutput int64
	// SendBuffer sets each connection's kernel send buffer (SO_SNDBUF) in
	// bytes; 0 keeps the kernel's autotuning.
	SendBuffer int
	// MaxConnections caps concurrent HTTP connections; 0 means fasthttp's
	// default (262144).
	MaxConnections int
	// TLS, when set, serves HTTPS.
	TLS *tls.Config
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Addr:                  "127.0.0.1:6389",
		SessionTTL:            60 * time.Second,
		MaxSessions:           100000,
		MaxSessionsPerIP:      1000,
		AuthFailuresPerMinute: 60,
		RateLimitMaxIPs:       10000,
		MaxBodyBytes:          4096,
		ReadTimeout:           60 * time.Second,
		WriteTimeout:          10 * time.Second,

		MaxStatsBytes:    1 << 20,
		StatsConcurrency: 2,
		MaxOutput:        64 << 20,
		SendBuffer:       256 << 10,
	}
}

// maxSeconds bounds every duration a request may name, so that now plus
// the duration cannot overflow int64 nanoseconds.
const maxSeconds = math.MaxInt32

// Validate reports the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Addr == "":
		return fmt.Errorf("httpfast: empty listen address")
	case c.SessionTTL <= 0:
		return fmt.Errorf("httpfast: session TTL must be > 0, got %v", c.SessionTTL)
	case c.SessionTTL > maxSeconds*time.Second:
		return fmt.Errorf("httpfast: session TTL must be <= %ds, got %v", maxSeconds, c.SessionTTL)
	case c.RateLimitPerIP < 0 || math.IsNaN(c.RateLimitPerIP) || math.IsInf(c.RateLimitPerIP, 0):
		return fmt.Errorf("httpfast: rate limit must be a finite number >= 0, got %v", c.RateLimitPerIP)
	case c.RateLimitPerIP > 0 && c.RateLimitMaxIPs < 2:
		return fmt.Errorf("httpfast: rate limit max IPs must be >= 2, got %d", c.RateLimitMaxIPs)
	case c.DefaultTTL < 0 || c.DefaultTTL > maxSeconds*time.Second:
		return fmt.Errorf("httpfast: default TTL must be in [0, %ds], got %v", maxSeconds, c.DefaultTTL)
	case c.ReadTimeout <= 0:
		return fmt.Errorf("httpfast: read timeout must be > 0, got %v", c.ReadTimeout)
	case c.WriteTimeout < 0:
		return fmt.Errorf("httpfast: write timeout must be >= 0, got %v", c.WriteTimeout)
	}
	for _, f := range [...]struct {
		name     string
		v, least int64
	}{
		{"max sessions", int64(c.MaxSessions), 0},
		{"max sessions per IP", int64(c.MaxSessionsPerIP), 0},
		{"auth failures per minute", int64(c.AuthFailuresPerMinute), 0},
		{"rate limit burst", int64(c.RateLimitBurst), 0},
		{"max body bytes", int64(c.MaxBodyBytes), 256},
		{"max stats bytes", int64(c.MaxStatsBytes), 4096},
		{"stats concurrency", int64(c.StatsConcurrency), 1},
		{"send buffer", int64(c.SendBuffer), 0},
		{"output budget", c.MaxOutput, 0},
		{"max connections", int64(c.MaxConnections), 0},
		{"max connections per IP", int64(c.MaxConnectionsPerIP), 0},
	} {
		if f.v < f.least {
			return fmt.Errorf("httpfast: %s must be >= %d, got %d", f.name, f.least, f.v)
		}
	}
	return nil
}

// Option adjusts a Server at construction.
type Option func(*options)

type options struct {
	connections func() int
	metrics     *metrics.Registry
	listeners   *listen.Set   // WithListeners
	admin       *adminOptions // WithAdmin
	snapshot    SnapshotFunc  // WithSnapshot
	snapToken   string
	ready       func() error // WithReadiness
	budget      *budget.Budget
}

type adminOptions struct {
	admin backend.Admin
	token string
}

// WithOutputBudget counts the stats bodies built and not yet written in
// b, which the TCP server may share; without it the server makes its own
// budget of Config.MaxOutput bytes.
func WithOutputBudget(b *budget.Budget) Option {
	return func(o *options) { o.budget = b }
}

// WithConnections supplies the TCP server's open connection count, which
// /v1/stats adds to the open sessions and /metrics reports.
func WithConnections(f func() int) Option {
	return func(o *options) { o.connections = f }
}

// WithListeners guards the REST listener in set (an accept error is
// counted, logged and backed off instead of ending Serve) and makes
// /healthz answer 503 while any listener of set is in backoff.
func WithListeners(set *listen.Set) Option {
	return func(o *options) { o.listeners = set }
}

// WithMetrics records the REST metrics in reg and serves all of reg on
// GET /metrics, so one scrape also shows the TCP server's. Without it the
// server makes a registry of its own (engine and REST metrics only).
func WithMetrics(reg *metrics.Registry) Option {
	return func(o *options) { o.metrics = reg }
}

// WithReadiness makes GET /readyz answer 503 with ready's error while it
// returns one. Without it /readyz follows the backend's Ready: 200 once
// the REST port serves on a single node.
func WithReadiness(ready func() error) Option {
	return func(o *options) { o.ready = ready }
}
