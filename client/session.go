package client

import (
	"context"
	"errors"
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
// without a session (its leader's address is kept for the retry of the
// request that needs one, see unattached), and a mutation on it is
// redirected.
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
			c.attached(conn, r, err)
			return // attached, broken, or a follower
		}
	}
	r, err := conn.roundTrip(ctx, codec.CmdSession, codec.SessionNew, nil, 0, nil)
	switch {
	case err != nil || r.Status == codec.StatusErrorNotLeader:
		c.attached(conn, r, err)
	case r.Status == codec.StatusOK && len(r.Token) == 32:
		c.mu.Lock()
		c.session, c.sessConn = r.Token, conn
		start := !c.pinging && !c.closed
		c.pinging = true
		c.mu.Unlock()
		if start {
			go c.keepalive(pingEvery(time.Duration(r.N) * time.Second))
		}
	default:
		c.noSess.Store(true)
	}
}

// attached notes the answer to a session request naming the Cluster's
// session on conn: conn acts for it (ok), or, for a not-leader answer,
// the leader it named.
func (c *Cluster) attached(conn *Conn, r reply, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
	case r.Status == codec.StatusOK:
		c.sessConn = conn
	case r.Status == codec.StatusErrorNotLeader:
		c.attachHint = ""
		if nl := (*NotLeaderError)(nil); errors.As(errorFor(r, ErrProtocol), &nl) {
			c.attachHint = nl.Leader
		}
	}
}

// unattached reports whether a request whose retry is matched by its
// request id (byID) must not go on conn: the servers offer sessions, and
// conn does not act for the Cluster's (its attach was answered
// not-leader, say by a node still taking over the leadership). The
// cluster scopes request ids to the session that sends them, so a request
// sent without the session, or retried without it, would not be known
// for the same one: the caller dials again, to hint when a node named the
// leader.
func (c *Cluster) unattached(conn *Conn) (hint string, ok bool) {
	if c.noSess.Load() {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessConn == conn {
		return "", false
	}
	return c.attachHint, true
}

// pingEvery is how often a Cluster with a session checks its connection:
// a quarter of the orphan TTL, within 100 ms and 5 s.
func pingEvery(orphanTTL time.Duration) time.Duration {
	return min(max(orphanTTL/4, 100*time.Millisecond), 5*time.Second)
}

// keepalive checks the connection every period while the Cluster is open,
// so that one that died (with its leader, say) is replaced, and the
// session taken back, within the orphan TTL even when the Cluster is idle
// (a Lock between renewals): a dead connection would otherwise be noticed
// only by the next request, after the session had expired and released
// what it held.
func (c *Cluster) keepalive(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		c.mu.Lock()
		closed, conn, id := c.closed, c.conn, c.session
		c.mu.Unlock()
		if closed {
			return
		}
		if id == "" || (conn != nil && conn.Err() == nil && len(conn.turn) > 0) {
			continue // a request in flight notices a broken connection itself
		}
		ctx, cancel := context.WithTimeout(context.Background(), every*2)
		_ = c.do(ctx, "session", "", idempotent, func(conn *Conn, _ *bool) error { return c.ping(ctx, conn) })
		cancel()
	}
}

// ping checks that conn works and acts for the session, on the leader.
func (c *Cluster) ping(ctx context.Context, conn *Conn) error {
	c.mu.Lock()
	id := c.session
	c.mu.Unlock()
	if id == "" {
		return nil
	}
	r, err := conn.roundTrip(ctx, codec.CmdSession, id, nil, 0, nil)
	switch {
	case err != nil && conn.Err() == nil:
		return nil // not sent: a request held the connection past ctx
	case err != nil:
		return err
	case r.Status == codec.StatusErrorNotLeader:
		return errorFor(r, ErrProtocol)
	case r.Status == codec.StatusOK:
		c.attached(conn, r, nil) // an unused connection attaches with it
	default:
		// The session is gone (its orphan TTL passed): what it held is
		// released. The next connection opens a new one. On a
		// connection that never acted for it, the error only says that
		// it may no longer name one: the next connection attaches.
		c.mu.Lock()
		if c.session == id && c.sessConn == conn {
			c.session = ""
		}
		c.mu.Unlock()
		c.retire(conn)
	}
	return nil
}

// closeSession asks conn's server to close the session sess, releasing
// what it holds at once rather than after its orphan TTL.
func (c *Cluster) closeSession(conn *Conn, sess string) {
	ctx, cancel := context.WithTimeout(context.Background(), closeSessionWait)
	defer cancel()
	_, _ = conn.roundTrip(ctx, codec.CmdSession, sess, []byte(codec.SessionClose), 0, nil)
}
