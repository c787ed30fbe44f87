package client

import (
	"strings"

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
// nobody waits for: for a set, the cancel names its first key.
func (c *muxConn) queueCancelLocked(call *muxCall) {
	key, arg := call.key, []byte(nil)
	if call.cmd.Multi() {
		key, _, _ = strings.Cut(call.key, " ")
		arg = []byte(codec.CancelSet)
	}
	id := c.queueLocked(codec.CmdCancel, key, arg)
	c.pending[id] = &muxCall{abandoned: true}
}

// withdraw sends the cancel request for an abandoned call whose
// connection broke under it, on the connection up that the call's key
// picks, as a retry of the call would be: with a session, the request
// still waits for it on the server. Without one, the server withdrew it
// when the connection closed.
func (m *Mux) withdraw(call *muxCall) {
	if m.Session() == "" {
		return
	}
	home, _, _ := strings.Cut(call.key, " ")
	start := homeConn(home, len(m.conns))
	for i := range uint32(len(m.conns)) {
		c := m.conns[(start+i)%uint32(len(m.conns))]
		c.mu.Lock()
		if c.isUp {
			c.queueCancelLocked(call)
			c.flushLocked()
			return
		}
		c.mu.Unlock()
	}
}
