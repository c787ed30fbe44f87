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

// Option configures Dial.
type Option func(*options)

type options struct {
	tls         *tls.Config
	authToken   string
	dialTimeout time.Duration
	ioTimeout   time.Duration
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
}

func defaultOptions() options {
	return options{dialTimeout: DefaultDialTimeout, ioTimeout: DefaultIOTimeout}
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
