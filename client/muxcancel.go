package client

import (
	"context"
	"strings"
	"time"

	"github.com/latchd/latchd/codec"
)

// Withdrawing an abandoned request over a Mux. When a caller's context
// ends while its acquire, wait or set waits on the server, the Mux sends
// the tagged cancel request (docs/protocol.md "Tagged mode"): the server
// takes the request out of the key's queue at once and answers it
// "timeout". The call stays abandoned, so a grant that won the race (the
// cancel then answers error_not_enqueued), or a server that does not know
// cancel (it answers error), still ends with the grant released.

// queueCancelLocked queues the cancel request for call, whose answer
// nobody waits for: for a set, the cancel names its first key. An
// enqueue's place is not a parked wait: a wait that does not wait (its
// timeout 0) withdraws it instead, or collects the grant it got, which
// is then released as any abandoned grant.
func (c *muxConn) queueCancelLocked(call *muxCall) {
	redo := func() { c.m.withdraw(call) }
	if w, ok := enqueueWait(call.cmd); ok {
		id := c.queueLocked(w, call.key, []byte("0"))
		c.pending[id] = &muxCall{abandoned: true, cmd: w, key: call.key, redo: redo}
		return
	}
	key, arg := call.key, []byte(nil)
	if call.cmd.Multi() {
		key, _, _ = strings.Cut(call.key, " ")
		arg = []byte(codec.CancelSet)
	}
	id := c.queueLocked(codec.CmdCancel, key, arg)
	c.pending[id] = &muxCall{abandoned: true, redo: redo}
}

// enqueueWait returns the wait that collects what an enqueue of cmd
// queued, and whether cmd is an enqueue.
func enqueueWait(cmd codec.Cmd) (codec.Cmd, bool) {
	switch cmd {
	case codec.CmdEnqueue:
		return codec.CmdWait, true
	case codec.CmdSemEnqueue:
		return codec.CmdSemWait, true
	case codec.CmdReadEnqueue:
		return codec.CmdReadWait, true
	case codec.CmdWriteEnqueue:
		return codec.CmdWriteWait, true
	}
	return 0, false
}

// withdrawable reports whether a request of cmd that its caller left may
// leave something queued for the session: a wait, a set or an enqueue.
func withdrawable(cmd codec.Cmd) bool {
	_, enq := enqueueWait(cmd)
	return enq || cmd.Blocking()
}

// withdraw sends the cancel request for an abandoned call whose
// connection broke under it, on the connection up that the call's key
// picks, as a retry of the call would be: with a session, the request
// still waits for it on the server. Without one, the server withdrew it
// when the connection closed. Where the server takes a request over by
// its id (muxdedup.go), a call with an id is sent again first, abandoned,
// on the same connection: it takes over what the first attempt got (a
// grant made while no connection was up is then released) and the cancel
// behind it withdraws it. It waits for a connection to come up, up to
// the session's orphan TTL.
func (m *Mux) withdraw(call *muxCall) {
	if m.Session() == "" {
		return
	}
	home, _, _ := strings.Cut(call.key, " ")
	resend := false
	if call.id != "" {
		ctx, cancel := context.WithTimeout(context.Background(), m.orphanTTL())
		resend, _ = m.dedupes(ctx)
		cancel()
	}
	until := time.Now().Add(m.orphanTTL())
	for !m.withdrawOn(home, call, resend) && time.Now().Before(until) {
		select {
		case <-m.quit:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// withdrawOn is withdraw on the first connection up from home's, the call
// sent again first if resend, and reports whether one was up.
func (m *Mux) withdrawOn(home string, call *muxCall, resend bool) bool {
	start := homeConn(home, len(m.conns))
	for i := range uint32(len(m.conns)) {
		c := m.conns[(start+i)%uint32(len(m.conns))]
		c.mu.Lock()
		if c.isUp {
			if resend {
				tag := c.queueIDLocked(call.cmd, call.key, call.id, call.arg)
				c.pending[tag] = &muxCall{abandoned: true, cmd: call.cmd, key: call.key}
			}
			c.queueCancelLocked(call)
			c.flushLocked()
			return true
		}
		c.mu.Unlock()
	}
	return false
}
