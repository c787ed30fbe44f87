package client

import (
	"context"
	"time"

	"github.com/latchd/latchd/codec"
)

// A Cluster acts for a session: every connection it opens first names it
// (the session request, docs/protocol.md "Sessions"), so that what the
// Cluster holds and waits for belongs to the session, not to one
// connection. When a connection dies (its leader crashed, say), the
// cluster keeps it all for its orphan TTL; the next connection names the
// session and takes it back, and the request being retried with its id
// finds its place in the queue. A server that offers no sessions (a single
// node, or --orphan-ttl 0) answers error: the Cluster then goes on without
// one, each connection its own owner.

// closeSessionWait bounds Close's request to close the session; without
// an answer, the orphan TTL ends the session.
const closeSessionWait = time.Second

// attach has conn act for the Cluster's session: the one it has, or a new
// one when it has none or the one it had is gone (past its orphan TTL).
// Errors leave conn as it is: a broken conn fails the request that
// follows, which is retried; a follower's not-leader answer leaves it
// without a session, and a mutation on it is redirected.
func (c *Cluster) attach(ctx context.Context, conn *Conn) {
	if c.noSess.Load() {
		return
	}
	c.mu.Lock()
	id := c.session
	c.mu.Unlock()
	if id != "" {
		r, err := conn.roundTrip(ctx, codec.CmdSession, id, nil, 0, nil)
		if err != nil || r.Status != codec.StatusError {
			return // attached, broken, or a follower
		}
	}
	r, err := conn.roundTrip(ctx, codec.CmdSession, codec.SessionNew, nil, 0, nil)
	switch {
	case err != nil || r.Status == codec.StatusErrorNotLeader:
	case r.Status == codec.StatusOK && len(r.Token) == 32:
		c.mu.Lock()
		c.session = r.Token
		c.mu.Unlock()
	default:
		c.noSess.Store(true)
	}
}

// closeSession asks conn's server to close the session sess, releasing
// what it holds at once rather than after its orphan TTL.
func (c *Cluster) closeSession(conn *Conn, sess string) {
	ctx, cancel := context.WithTimeout(context.Background(), closeSessionWait)
	defer cancel()
	_, _ = conn.roundTrip(ctx, codec.CmdSession, sess, []byte(codec.SessionClose), 0, nil)
}
