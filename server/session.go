package server

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/metrics"
)

// peer is what a session needs of its transport from other goroutines: a
// way to get its loop to run again, and to close it. gnet.Conn is one; the
// TLS transport has its own.
type peer interface {
	Wake(cb gnet.AsyncCallback) error
	Close() error
}

// session is one TCP connection's state.
type session struct {
	// Event loop only (the connection's gnet loop, or its TLS goroutine).
	conn   peer
	loop   *loop // the gnet loop's context; nil for TLS
	id     engine.OwnerID
	parked bool       // a blocking request waits; decoding is paused
	authed bool       // auth passed, or none is configured
	out    []byte     // answers of one OnTraffic call, written once
	ip     net.Addr   // client address, kept only when MaxConnectionsPerIP is on
	authIP netip.Addr // client IP, kept only while auth is limited and pending
	// fd is the socket a direct hand-off writes to (handoff.go); -1 for
	// none (TLS). The hand-off also carries the answers the backend
	// gives later. met is the server's metrics, or nil.
	fd  int
	met *metrics.TCP
	srv *Server

	// Any goroutine: who owns the event-loop-only fields above and the
	// socket's write side while the session is parked (handoff.go).
	hand atomic.Uint32

	// Event loop only, set only with metrics on: when the parked request
	// was decoded, and its command, for its latency.
	parkedAt  int64
	parkedCmd codec.Cmd

	// The backend's side (submit.go). Event loop only: used, the
	// connection made a request the backend took (so a Disconnect is
	// due at close); cmd, the command of the request pending, written
	// before it is submitted and read by Answer. Any goroutine:
	// inflight, its requests the backend has yet to answer; closed, it
	// has closed; disconnected, its Disconnect was submitted.
	used         bool
	cmd          codec.Cmd
	req          backend.Request // the request being submitted
	multi        *multiState     // ml/msl buffers, made at the first (multi.go)
	inflight     atomic.Int32
	closed       atomic.Bool
	disconnected atomic.Bool
	// sess is the owner of the session the connection acts for
	// (orphan.go), 0 for none: then the connection is its own owner.
	sess atomic.Uint64
	// redirected: it was answered error_not_leader (redirect.go).
	redirected atomic.Bool
	// tg is the tagged mode's state (tagged.go).
	tg tagState

	// Output accounting (output.go). Event loop only: bytes handed to
	// the transport so far, unsent bytes counted in the budget, bytes
	// sent when the stall being timed began, and whether a stats answer
	// is awaited.
	queued    uint64
	acct      int64
	stallMark uint64
	stalled   bool
	statsWait bool
	// Any goroutine: acct for the enforcer, when the stall began (Unix
	// ns), and the enforcer's mark.
	unsent     atomic.Int64
	stallSince atomic.Int64
	evict      atomic.Bool

	// Any goroutine.
	partialSince atomic.Int64 // Unix ns a partial request has sat since; 0 = none
	woken        atomic.Bool  // a Wake is pending; merges bursts of Deliver
	mu           sync.Mutex
	inbox        []byte // answers delivered by the engine, oldest first
	delivered    bool   // the parked request has its answer in inbox
	statsLine    []byte // the stats answer, counted in the budget (output.go)
	gone         bool   // closed: a late stats answer is dropped

	// watch.go: the connection's watch (event loop only), and whether it
	// ended with an error line to write before closing (any goroutine).
	watcher    *engine.Watcher
	watchEnded atomic.Bool
}

// Deliver implements engine.Sink. It runs on whichever goroutine produced
// the outcome and never blocks: it queues the answer and wakes the
// connection's loop.
func (ss *session) Deliver(o engine.Outcome) {
	if o.Result == engine.Canceled {
		// The connection's own Disconnect cancels its parked request,
		// once it has closed. On a replicated node a snapshot restore
		// also cancels every parked request: the request may still be
		// queued there and be granted unheard, so the outcome is
		// unknown. Closing the connection says so (and releases, through
		// the log, what it holds), as for any request whose fate is
		// unknown.
		if !ss.closed.Load() {
			_ = ss.conn.Close()
		}
		return
	}
	if ss.direct(o) {
		return
	}
	ss.enqueue(o)
	ss.wake()
}

// wake gets the connection's loop to take what was queued, once per burst.
func (ss *session) wake() {
	if ss.woken.CompareAndSwap(false, true) {
		_ = ss.conn.Wake(nil) // fails only when the conn is gone; OnClose cleans up
	}
}

// enqueue queues the answer to the parked request for the connection's
// next turn.
func (ss *session) enqueue(o engine.Outcome) {
	ss.mu.Lock()
	ss.inbox = appendOutcome(ss.inbox, codec.StatusOK, o)
	ss.delivered = true
	ss.mu.Unlock()
}

// via returns the engine.Via for requests of this session: its gnet loop,
// or none for a TLS connection.
func (ss *session) via() engine.Via {
	if ss.loop == nil {
		return nil
	}
	return ss.loop
}

// takeDelivered appends what Deliver queued to out and unparks the session
// if its request was answered. Event loop only.
func (ss *session) takeDelivered(out []byte) []byte {
	ss.woken.Store(false) // before reading inbox, so a later Deliver wakes us again
	ss.mu.Lock()
	if len(ss.inbox) > 0 {
		out = append(out, ss.inbox...)
		ss.inbox = ss.inbox[:0]
	}
	if ss.delivered {
		ss.delivered, ss.parked = false, false
	}
	ss.mu.Unlock()
	return out
}
