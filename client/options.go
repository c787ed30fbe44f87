package client

import (
	"context"
	"crypto/tls"
	"net"
	"time"
)

// DefaultAddr is the server address used when none is given.
const DefaultAddr = "127.0.0.1:6388"

// Default timeouts; see WithDialTimeout and WithIOTimeout.
const (
	DefaultDialTimeout = 5 * time.Second
	DefaultIOTimeout   = 10 * time.Second
)

// Default retry budget of a Cluster; see WithMaxAttempts and WithBackoff.
const (
	DefaultMaxAttempts = 8
	DefaultBackoffBase = 50 * time.Millisecond
	DefaultBackoffMax  = 2 * time.Second
)

// Option configures Dial and DialCluster.
type Option func(*options)

type options struct {
	tls         *tls.Config
	authToken   string
	dialTimeout time.Duration
	ioTimeout   time.Duration
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)

	// Cluster only.
	maxAttempts int
	backoffBase time.Duration
	backoffMax  time.Duration
}

// newOptions returns the defaults with opts applied.
func newOptions(opts []Option) options {
	o := options{
		dialTimeout: DefaultDialTimeout,
		ioTimeout:   DefaultIOTimeout,
		maxAttempts: DefaultMaxAttempts,
		backoffBase: DefaultBackoffBase,
		backoffMax:  DefaultBackoffMax,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithTLS makes Dial speak TLS with cfg. A cfg without ServerName gets the
// host of the address dialled.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithAuthToken makes Dial send the shared secret (the auth command) before
// anything else. An empty token sends nothing.
func WithAuthToken(token string) Option { return func(o *options) { o.authToken = token } }

// WithDialTimeout bounds connecting, the TLS handshake and auth
// (DefaultDialTimeout; <= 0 means no bound beyond the context's).
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithIOTimeout bounds each round trip (DefaultIOTimeout). A blocking
// request (acquire, wait) may take its own timeout plus this much. When it
// passes, the connection is closed: the answer can no longer be matched to
// its request. <= 0 means no bound beyond the context's.
func WithIOTimeout(d time.Duration) Option { return func(o *options) { o.ioTimeout = d } }

// WithDialer replaces the TCP dialer, for proxies and tests.
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.dial = dial }
}

// WithMaxAttempts bounds how many times a Cluster tries one operation,
// counting every dial and every request (DefaultMaxAttempts; values < 1
// mean 1). The context's deadline bounds it too. Dial ignores it.
func WithMaxAttempts(n int) Option {
	return func(o *options) { o.maxAttempts = max(n, 1) }
}

// WithBackoff sets a Cluster's pause between attempts: base doubled after
// every attempt, at most maxDelay, of which a random half is taken off (equal
// jitter). A redirect to a leader an answer names is tried at once.
// Defaults: DefaultBackoffBase, DefaultBackoffMax. Dial ignores it.
func WithBackoff(base, maxDelay time.Duration) Option {
	return func(o *options) {
		o.backoffBase = base
		o.backoffMax = maxDelay
	}
}
