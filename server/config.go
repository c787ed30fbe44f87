package server

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/latchd/latchd/codec"
)

// Config sets the TCP server up. Build it from DefaultConfig.
type Config struct {
	// Addr is the listen address, host:port.
	Addr string
	// EventLoops is the number of gnet event loops; 0 means one per core.
	EventLoops int
	// ReadTimeout closes a connection that has sat on a partial request
	// this long. A connection parked on a blocking request is not idle.
	ReadTimeout time.Duration
	// MaxConnections caps open connections; 0 means no cap.
	MaxConnections int
	// AuthToken, when set, must be sent with auth as the first request.
	AuthToken string
	// AutoRelease releases what a connection held when it closes. Its
	// queued waits are withdrawn either way.
	AutoRelease bool
	// MaxParked caps the bytes a client may pipeline behind a request that
	// is waiting; past it the connection is closed.
	MaxParked int
	// TLS, when set, serves TLS instead of plain TCP. gnet has no TLS, so
	// TLS connections are served by crypto/tls with a reader goroutine per
	// connection, through the same codec, session and engine code.
	TLS *tls.Config
	// MaxConnectionsPerIP caps open connections from one client address;
	// 0 means no cap.
	MaxConnectionsPerIP int
	// AuthFailuresPerMinute rate-limits failed auth per client IP: an IP
	// may fail this many times at once, then this many times a minute.
	// Past it, its auth requests are answered error_auth and closed
	// without the secret being compared. 0 turns the limit off.
	AuthFailuresPerMinute int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Addr:        "127.0.0.1:6388",
		ReadTimeout: 23 * time.Second,
		AutoRelease: true,
		MaxParked:   64 << 10,

		AuthFailuresPerMinute: 60,
	}
}

// Validate reports the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Addr == "":
		return fmt.Errorf("server: empty listen address")
	case c.EventLoops < 0:
		return fmt.Errorf("server: event loops must be >= 0, got %d", c.EventLoops)
	case c.ReadTimeout <= 0:
		return fmt.Errorf("server: read timeout must be > 0, got %v", c.ReadTimeout)
	case c.MaxConnectionsPerIP < 0:
		return fmt.Errorf("server: max connections per IP must be >= 0, got %d", c.MaxConnectionsPerIP)
	case c.MaxConnections < 0:
		return fmt.Errorf("server: max connections must be >= 0, got %d", c.MaxConnections)
	case len(c.AuthToken) > codec.MaxLine || strings.ContainsAny(c.AuthToken, "\r\n"):
		// The auth request carries the secret on one line.
		return fmt.Errorf("server: auth token must be at most %d bytes with no line break, got %d bytes", codec.MaxLine, len(c.AuthToken))
	case c.AuthFailuresPerMinute < 0:
		return fmt.Errorf("server: auth failures per minute must be >= 0, got %d", c.AuthFailuresPerMinute)
	case c.MaxParked < 1024:
		return fmt.Errorf("server: max parked bytes must be >= 1024, got %d", c.MaxParked)
	}
	return nil
}
