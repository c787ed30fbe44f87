package server

import (
	"runtime"

	"github.com/panjf2000/gnet/v2"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// The direct hand-off. A grant for a waiter on another event loop would
// normally go through the waiter's inbox and a gnet Wake: a task, an
// eventfd write, and a second loop woken up just to copy one line to a
// socket. On a hot key that wake sits on every hand-off. When the waiter
// is parked with nothing else to do (its request is the last thing it
// sent, and its loop has nothing buffered to write to it), the goroutine
// that made the grant writes the line to the socket itself and its loop
// never hears of it.
//
// Who may touch a session's event-loop-only fields and write to its socket
// is decided by ss.hand:
//
//	handLoop     the loop owns the session (the usual state).
//	handIdle     the loop parked it idle: parked, no input left to decode,
//	             no output buffered in gnet. Either the loop (at its next
//	             turn) or a deliverer (with a grant) may take it, by CAS.
//	handClaimed  a deliverer took it: it owns the loop-only fields and the
//	             socket's write side until it stores handLoop.
//	handWanted   as handClaimed, and the loop had a turn to run meanwhile
//	             (more input, a Wake): the deliverer wakes it when done.
//	handClosed   the loop is closing the connection: nobody may claim it.
//
// The loop gives the session up only by storing handIdle after its last
// access in a turn, and a deliverer gives it back by storing handLoop after
// its last access; both sides take it with a CAS, so each access on one
// side happens before the other side's next one. The socket's fd stays
// open while claimed: OnClose waits for a claim to end before gnet closes
// the fd, so a deliverer never writes to a number the kernel has reused.
const (
	handLoop uint32 = iota
	handIdle
	handClaimed
	handWanted
	handClosed
)

// park offers the session to deliverers if its turn left it parked with
// nothing in or out. Event loop only, at the end of a turn; consumed is
// whether the turn decoded all of the connection's buffered input.
//
// A CAS, not a store: gnet closes a connection inside Write when the
// socket fails (OnClose runs, revoke stores handClosed, the descriptor is
// closed) and the turn then goes on to here. Storing handIdle would offer
// the closed session again, and a grant collected before its disconnect
// would be written to a descriptor number the kernel may have reused.
func (ss *session) park(c gnet.Conn, consumed bool) {
	if ss.parked && consumed && ss.fd >= 0 && c.OutboundBuffered() == 0 {
		ss.hand.CompareAndSwap(handLoop, handIdle)
	}
}

// own takes the session back for a turn of its loop. It reports false when
// a deliverer holds it: the deliverer runs the turn's Wake when it is done.
// Event loop only.
func (ss *session) own() bool {
	for {
		switch st := ss.hand.Load(); st {
		case handLoop, handClosed:
			return true
		case handIdle:
			if ss.hand.CompareAndSwap(handIdle, handLoop) {
				return true
			}
		case handClaimed:
			if ss.hand.CompareAndSwap(handClaimed, handWanted) {
				return false
			}
		case handWanted:
			return false
		}
	}
}

// revoke ends direct hand-offs for good, before gnet closes the socket:
// it waits out a deliverer that holds the session (one write system call).
// Event loop only, from OnClose.
func (ss *session) revoke() {
	for {
		switch st := ss.hand.Load(); st {
		case handLoop, handIdle:
			if ss.hand.CompareAndSwap(st, handClosed) {
				return
			}
		case handClosed:
			return
		default:
			runtime.Gosched()
		}
	}
}

// direct writes o to the socket of a session parked idle, from any
// goroutine. It reports false, having done nothing, when the session is
// not idle: the caller queues o and wakes the loop as usual.
func (ss *session) direct(o engine.Outcome) bool {
	if !ss.hand.CompareAndSwap(handIdle, handClaimed) {
		return false
	}
	// The session is ours until we store handLoop.
	line := appendOutcome(ss.out[:0], codec.StatusOK, o)
	ss.out = line[:0]
	ss.writeClaimed(line)
	return true
}

// directLine is direct for an answer already formatted (one the backend
// gave later: submit.go).
func (ss *session) directLine(line []byte) bool {
	if !ss.hand.CompareAndSwap(handIdle, handClaimed) {
		return false
	}
	ss.writeClaimed(line)
	return true
}

// writeClaimed writes line to the socket of a session this goroutine has
// claimed, unparks it, and gives it back to its loop.
func (ss *session) writeClaimed(line []byte) {
	n, err := writeFd(ss.fd, line)
	if n < 0 || err != nil {
		n = 0
	}
	wake := false
	if n < len(line) {
		// The socket is full (or failing): the loop writes the rest, or
		// sees the error and closes.
		ss.mu.Lock()
		ss.inbox = append(ss.inbox, line[n:]...)
		ss.delivered = true
		ss.mu.Unlock()
		wake = true
	} else {
		ss.parked = false
		if ss.parkedAt != 0 { // set only with metrics on
			ss.srv.unparked(ss)
		}
	}
	if !ss.hand.CompareAndSwap(handClaimed, handLoop) {
		ss.hand.Store(handLoop) // handWanted: the loop skipped a turn
		wake = true
	}
	if wake {
		// Not ss.wake: a turn the loop skipped left woken set, and its
		// Wake is spent.
		ss.woken.Store(true)
		_ = ss.conn.Wake(nil)
	}
}
