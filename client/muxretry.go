package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchd/latchd/codec"
)

// Sending a Mux's requests again through a broken connection or a
// failover. With a session, every mutating request carries a request id
// (docs/protocol.md "Request ids"), the same on every attempt. What the
// session holds and waits for outlives a broken connection for the orphan
// TTL, so a request whose connection breaks (or that a node that no
// longer leads answers error_not_leader) is sent again with its id on the
// next connection up, once the Mux has dialled again and attached the
// session: in a cluster the retry takes over what the first attempt got,
// its grant (same token) or its place in the queue. The caller sees one
// result. A server that takes nothing over by id (a single node,
// muxdedup.go) gets a waiting request withdrawn instead, and the caller
// the error. Without a session nothing is sent again: a broken connection
// released what it held and withdrew what it waited for.

// muxReq is a request sent until answered: its argument line is built for
// each attempt with the time left to wait.
type muxReq struct {
	cmd  codec.Cmd
	home string // the key that picks the connection
	key  string // the key line, without the id
	id   string // the request id; "" for none
	// timeout is how long the request may wait; negative: its argument
	// line takes no timeout (an enqueue). rest is the argument line after
	// the timeout (and its space).
	timeout time.Duration
	rest    []byte
}

// arg returns q's argument line for a wait of timeout.
func (q *muxReq) arg(timeout time.Duration) []byte {
	if q.timeout < 0 {
		return q.rest
	}
	return timedArg(timeout, q.rest)
}

// requestID returns a new request id for a request whose key line is
// line: "" without a session, from a server known to take nothing over
// by id (a single node: the id would only lengthen the line), or when the
// line leaves no room for it.
func (m *Mux) requestID(line string) string {
	m.mu.Lock()
	none := m.session == "" || m.dedup == dedupNo
	m.mu.Unlock()
	if none {
		return ""
	}
	return m.ids.forLine(line)
}

// orphanTTL returns the session's orphan TTL.
func (m *Mux) orphanTTL() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.orphan
}

// resend reports whether a request answered r, err was not run for sure
// and may be sent again by id: its connection broke, or it reached a node
// that does not lead.
func resend(r reply, err error) bool {
	if err != nil {
		return errors.Is(err, ErrClosed)
	}
	return r.Status == codec.StatusErrorNotLeader
}

// send runs q until it is answered. Sent again, a waiting request asks for
// the rest of its timeout, rounded up to whole seconds as the protocol
// wants (0 once it has passed: try once); where the retry takes over the
// first attempt's place, the server keeps that attempt's deadline. The
// retries go on while ctx allows, up to the orphan TTL past the request's
// own timeout (then what it left on the server is gone). When they stop
// short of an answer, or the server does not take a request over by its
// id (muxdedup.go), a waiting request is withdrawn (Mux.withdraw) and the
// caller gets the error.
func (m *Mux) send(ctx context.Context, q muxReq) (reply, error) {
	wait := waitFor(q.timeout)
	deadline := time.Now().Add(wait)
	r, err := m.callHome(ctx, q.home, q.cmd, q.key, q.id, q.arg(q.timeout), wait)
	if !resend(r, err) || m.Session() == "" {
		return r, err
	}
	if q.id == "" { // nothing to take it over by: what waits is withdrawn
		if withdrawable(q.cmd) && !m.isClosed() {
			go m.withdraw(&muxCall{cmd: q.cmd, key: q.key})
		}
		return r, err
	}
	rctx, cancel := context.WithDeadline(ctx, later(deadline, time.Now()).Add(m.orphanTTL()))
	defer cancel()
	for resend(r, err) {
		c, takesOver, cerr := m.reconnect(rctx, q.home, q.cmd)
		if cerr != nil || !takesOver {
			if withdrawable(q.cmd) && !m.isClosed() {
				go m.withdraw(&muxCall{cmd: q.cmd, key: q.key, id: q.id, arg: q.arg(0)})
			}
			if cerr == nil {
				return r, err // the server takes nothing over by id
			}
			return reply{}, stopErr(ctx, cerr)
		}
		timeout := q.timeout
		if timeout > 0 {
			timeout = max(time.Until(deadline), 0)
		}
		r, err = c.do(rctx, q.cmd, q.key, q.id, q.arg(timeout), waitFor(timeout))
	}
	if err != nil && ctx.Err() == nil && rctx.Err() != nil {
		err = fmt.Errorf("%w: no answer within the orphan TTL after the wait's timeout", ErrClosed)
	}
	return r, err
}

// reconnect waits for a connection up for the next attempt of a request
// on home, and reports whether the server takes a request over by its
// id. It fails when ctx ends or the Mux closes.
func (m *Mux) reconnect(ctx context.Context, home string, cmd codec.Cmd) (*muxConn, bool, error) {
	for {
		if err := pause(ctx); err != nil {
			return nil, false, err
		}
		c, err := m.upConn(ctx, home, cmd)
		if err != nil {
			return nil, false, err
		}
		if d, err := m.dedupes(ctx); err == nil {
			return c, d, nil
		}
	}
}

// stopErr is the error of a request whose attempts stopped on stop:
// ctx's error, the Mux's close, or the end of the orphan TTL.
func stopErr(ctx context.Context, stop error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(stop, ErrClosed):
		return stop
	}
	return fmt.Errorf("%w: no connection within the orphan TTL after the wait's timeout", ErrClosed)
}

// waitFor returns how long the server may take to answer a request that
// waits up to timeout (negative: takes no wait): timeout in whole seconds,
// as the protocol sends it.
func waitFor(timeout time.Duration) time.Duration {
	return time.Duration(seconds(timeout)) * time.Second
}

// pause waits a moment between attempts (the connection that broke is
// being dialled again), or fails when ctx ends first.
func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Millisecond):
		return nil
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
