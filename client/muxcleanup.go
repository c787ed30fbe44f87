package client

import (
	"context"

	"github.com/latchd/latchd/codec"
)

// What a Mux sends on its own behalf after a caller left: the cancel of
// an abandoned wait (muxcancel.go) and the release of a grant nobody
// waits for. With a session, what the session holds and waits for
// outlives a broken connection, so such a request must not be lost with
// its connection: a grant or a wait left behind would hold the key for
// the session, and nobody would release it until its lease ran out. When
// one is lost (its connection broke first, or a node that no longer leads
// answered it) it is sent again on the next connection up, through a
// failover, for up to the session's orphan TTL. Without a session the
// server released and withdrew what the connection had when it closed.

// redo sends call's request again, when it is one the Mux sent on its own
// behalf and the Mux acts for a session.
func (m *Mux) redo(call *muxCall) {
	if call.redo != nil && m.Session() != "" && !m.isClosed() {
		go call.redo()
	}
}

// releaseAll releases keys[i] held with toks[i], for grants nobody waits
// for, each sent again if it is lost (Mux.releaseLost).
func (c *muxConn) releaseAll(rel codec.Cmd, keys, toks []string) {
	c.mu.Lock()
	if !c.isUp {
		c.mu.Unlock()
		for i := range keys {
			c.m.redo(&muxCall{redo: func() { c.m.releaseLost(rel, keys[i], toks[i]) }})
		}
		return
	}
	for i, key := range keys {
		id := c.queueLocked(rel, key, []byte(toks[i]))
		c.pending[id] = &muxCall{abandoned: true, redo: func() { c.m.releaseLost(rel, key, toks[i]) }}
	}
	c.flushLocked()
}

// releaseLost sends a lost release again until it is answered, across
// reconnections, for up to the session's orphan TTL.
func (m *Mux) releaseLost(rel codec.Cmd, key, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), m.orphanTTL())
	defer cancel()
	go func() {
		select {
		case <-m.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, _ = m.retry(ctx, rel, key, []byte(token))
}
