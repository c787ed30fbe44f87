package server

import (
	"crypto/tls"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/latchd/latchd/codec"
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
	// OrphanTTL is how long a session's holds and waits outlive its
	// connection, for a new one to take back (orphan.go); 0 turns TCP
	// sessions off.
	OrphanTTL time.Duration
	// MaxParked caps the bytes a client may pipeline behind a request that
	// is waiting; past it the connection is closed.
	MaxParked int
	// TLS, when set, serves TLS instead of plain TCP: crypto/tls with a
	// goroutine per connection (gnet has no TLS), through the same code.
	TLS *tls.Config
	// MaxConnectionsPerIP caps open connections from one client address;
	// 0 means no cap.
	MaxConnectionsPerIP int
	// AuthFailuresPerMinute rate-limits failed auth per client IP: this
	// many at once, then this many a minute; past it, auth is refused
	// without a comparison. 0 turns the limit off.
	AuthFailuresPerMinute int

	// MaxConnOutput caps the answers buffered for one connection that its
	// client has not read (a stats answer counts before it is buffered);
	// past it the connection is closed.
	MaxConnOutput int
	// MaxOutput is the budget of answers buffered for all connections
	// together (shared with REST through WithOutputBudget); 0 means none.
	// Past it the largest holders are closed and stats answer totals only.
	MaxOutput int64
	// WriteTimeout closes a connection that has had answers unsent and
	// sent nothing of them for this long (its client stopped reading); 0
	// turns it off. On TLS it bounds each write.
	WriteTimeout time.Duration
	// MaxStatsBytes caps a stats answer's JSON; a bigger state answers a
	// truncated list with "truncated": true and the totals. At most half
	// of MaxConnOutput.
	MaxStatsBytes int
	// SendBuffer sets each connection's SO_SNDBUF in bytes; 0 keeps the
	// kernel's autotuning (up to 4 MiB a client, outside these bounds).
	SendBuffer int
	// StatsConcurrency bounds the stats answers being built at once,
	// server-wide; the others wait their turn.
	StatsConcurrency int

	// DirectHandOff lets the granting goroutine write to an idle waiter's
	// socket itself instead of waking its event loop (handoff.go).
	DirectHandOff bool
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Addr:        "127.0.0.1:6388",
		ReadTimeout: 23 * time.Second,
		AutoRelease: true,
		OrphanTTL:   5 * time.Second,
		MaxParked:   64 << 10,

		AuthFailuresPerMinute: 60,
		MaxConnOutput:         4 << 20,
		MaxOutput:             64 << 20,
		WriteTimeout:          10 * time.Second,
		MaxStatsBytes:         1 << 20,
		StatsConcurrency:      2,
		SendBuffer:            256 << 10,
		DirectHandOff:         true,
	}
}

// Loops is the number of event loops the server runs: EventLoops, or when
// that is 0, one per core but one (left to the clock, REST and the
// kernel's network stack), and at least one.
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
	case len(c.AuthToken) > codec.MaxLine || strings.ContainsAny(c.AuthToken, "\r\n"):
		// The auth request carries the secret on one line.
		return fmt.Errorf("server: auth token must be at most %d bytes with no line break, got %d bytes", codec.MaxLine, len(c.AuthToken))
	case c.AuthFailuresPerMinute < 0:
		return fmt.Errorf("server: auth failures per minute must be >= 0, got %d", c.AuthFailuresPerMinute)
	case c.OrphanTTL < 0:
		return fmt.Errorf("server: orphan TTL must be >= 0, got %v", c.OrphanTTL)
	case c.MaxParked < 1024:
		return fmt.Errorf("server: max parked bytes must be >= 1024, got %d", c.MaxParked)
	case c.MaxConnOutput < 64<<10:
		return fmt.Errorf("server: max output per connection must be >= 65536 bytes, got %d", c.MaxConnOutput)
	case c.MaxOutput != 0 && c.MaxOutput < int64(c.MaxConnOutput):
		return fmt.Errorf("server: output budget (%d) must be 0 or >= the per-connection cap (%d)", c.MaxOutput, c.MaxConnOutput)
	case c.MaxOutput < 0:
		return fmt.Errorf("server: output budget must be >= 0, got %d", c.MaxOutput)
	case c.WriteTimeout < 0:
		return fmt.Errorf("server: write timeout must be >= 0, got %v", c.WriteTimeout)
	case c.MaxStatsBytes < 4096 || c.MaxStatsBytes > c.MaxConnOutput/2:
		return fmt.Errorf("server: max stats bytes must be within 4096 and half the per-connection output cap (%d), got %d",
			c.MaxConnOutput/2, c.MaxStatsBytes)
	case c.SendBuffer < 0:
		return fmt.Errorf("server: send buffer must be >= 0, got %d", c.SendBuffer)
	case c.StatsConcurrency < 1:
		return fmt.Errorf("server: stats concurrency must be >= 1, got %d", c.StatsConcurrency)
	}
	return nil
}
