package server

import (
	"crypto/tls"
	"fmt"
	"runtime"
	"time"
)

// Config sets the TCP server up. Build it from DefaultConfig.
type Config struct {
	// Addr is the listen address, host:port.
	Addr string
	// EventLoops is the number of gnet event loops; 0 means automatic:
	// one per core but one (at least one), see Loops.
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
	// DirectHandOff lets the goroutine that grants a waiter write the
	// answer to the waiter's socket itself when the waiter is parked with
	// nothing else in or out, instead of waking the waiter's event loop
	// (docs/architecture.md, "How a grant crosses loops").
	DirectHandOff bool
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Addr:        "127.0.0.1:6388",
		ReadTimeout: 23 * time.Second,
		AutoRelease: true,
		MaxParked:   64 << 10,

		DirectHandOff: true,
	}
}

// Loops is the number of event loops the server runs: EventLoops, or when
// that is 0, one per core (GOMAXPROCS) but one, and at least one. The core
// left over serves what else runs in the process and on the host: the
// clock goroutine, REST, the kernel's network stack. On a 2-core machine
// one loop hands a hot key on faster than two (every grant stays on the
// loop, no wake-up of another one) at the same CPU per op on unique keys
// (docs/architecture.md, "How many event loops").
func (c Config) Loops() int {
	if c.EventLoops > 0 {
		return c.EventLoops
	}
	return max(1, runtime.GOMAXPROCS(0)-1)
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
	case c.MaxParked < 1024:
		return fmt.Errorf("server: max parked bytes must be >= 1024, got %d", c.MaxParked)
	}
	return nil
}
