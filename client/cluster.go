package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Cluster is a client of a latchd cluster: one connection to the node it
// believes leads, with the methods of Conn. A follower answers a mutating
// request with error_not_leader and the leader's address; Cluster then
// connects there (or, when no leader is named, to the next seed, after a
// jittered exponential backoff) and tries again, within a budget
// (WithMaxAttempts, WithBackoff, the context's deadline). When the budget
// is spent the call returns an error wrapping ErrNoLeader and the last
// cause.
//
// What is retried:
//
//   - Release, Renew, their Sem* forms and Stats are retried after a
//     not-leader answer and after a connection failure: they name a token,
//     so running one twice does no harm.
//   - Acquire, Enqueue, Wait and their Sem* forms carry a request id (the
//     same on every attempt of one call): after a not-leader answer or a
//     connection failure, even one after the request was written, they are
//     sent again with it. A cluster applies a request id once: a retry
//     whose first attempt was applied gets that attempt's answer, and its
//     new connection takes over the grant it made (same token) or its place
//     in the queue (docs/failover.md "Retries"). The caller sees one result.
//     Only a canceled context (and a key too long to carry the id) leaves
//     the outcome unknown: the call returns an error wrapping
//     ErrUnknownOutcome and the cause.
//
// Release and Renew carry request ids too, so a retried release answers
// what the first one did.
//
// Everything else is an answer, returned as Conn returns it (ErrTimeout,
// ErrNotHolder, ...). Canceling the context of a blocked call closes the
// connection, as with Conn; an acquire, enqueue or wait then returns an
// error wrapping both ErrUnknownOutcome and the context's error.
//
// A Cluster acts for a session where the cluster offers them (session.go):
// what it holds and waits for belongs to the session and outlives a broken
// connection for the cluster's orphan TTL, and the next connection takes
// it back. Without sessions a new connection is a new owner: Release and
// Renew reach the new leader with the same token, and a retried request
// takes over what its first attempt got, but a Wait after an Enqueue made
// on the old connection finds no queue entry (ErrNotQueued: Enqueue
// again). A not-leader answer never makes the client close a connection
// that may own a grant (its close could reach a node leading again, which
// would release it): such a connection stays open, unused, until Close
// (cluster_keep.go).
//
// A Cluster is safe for concurrent use; as with Conn, one request is in
// flight at a time and a blocking one holds the connection. Lock,
// Semaphore and Election with Cluster set open a Cluster per grant.
type Cluster struct {
	commands

	seeds []string
	opts  []Option
	o     options

	dialing chan struct{} // one slot: one dial at a time

	ids    requestIDs  // the request ids of its acquires, waits, releases, ...
	noSess atomic.Bool // the servers offer no sessions (session.go)

	mu      sync.Mutex
	conn    *Conn  // the current connection; nil between connections
	next    int    // the seed dialled when no leader is named
	session string // the session the connections act for; "" for none
	// sessConn is the connection that acts for the session; attachHint,
	// the leader a not-leader answer to its last attach named.
	sessConn   *Conn
	attachHint string
	pinging    bool // keepalive runs
	closed     bool
	// owning are the connections that may own a grant, aside those of
	// them a not-leader answer moved the client away from (cluster_keep.go).
	owning map[*Conn]struct{}
	aside  []*Conn
}

// DialCluster connects to the first of seeds that answers (trying them in
// turn within the retry budget) and returns a Cluster that follows the
// leader from there. opts are Dial's options plus WithMaxAttempts and
// WithBackoff; every connection is dialled with them.
func DialCluster(ctx context.Context, seeds []string, opts ...Option) (*Cluster, error) {
	if len(seeds) == 0 {
		return nil, fmt.Errorf("%w: no seed addresses", ErrBadRequest)
	}
	o := newOptions(opts)
	c := &Cluster{
		seeds:   slices.Clone(seeds),
		opts:    slices.Clone(opts),
		o:       o,
		dialing: make(chan struct{}, 1),
	}
	c.ids.init()
	c.commands = commands{c}
	if err := c.do(ctx, "dial", "", idempotent, func(*Conn, *bool) error { return nil }); err != nil {
		return nil, err
	}
	return c, nil
}

// Addr returns the address of the current connection, or "" between
// connections.
func (c *Cluster) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return ""
	}
	return c.conn.Addr()
}

// Close closes the current connection (the server releases what it held
// and withdraws what it waited for) and makes every later call fail with
// an error wrapping ErrClosed. Close is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	conn, sess, aside := c.conn, c.session, c.aside
	c.conn, c.closed, c.aside, c.owning = nil, true, nil, nil
	c.mu.Unlock()
	closeAside(aside)
	if conn == nil {
		return nil
	}
	if sess != "" {
		c.closeSession(conn, sess)
	}
	return conn.Close()
}

// call is do for an operation with a result.
func call[T any](c *Cluster, ctx context.Context, cmd, key string, r retry, op func(conn *Conn, sent *bool) (T, error)) (T, error) {
	var v T
	err := c.do(ctx, cmd, key, r, func(conn *Conn, sent *bool) error {
		var err error
		v, err = op(conn, sent)
		return err
	})
	return v, err
}

// stats is Conn.Stats on the current connection.
func (c *Cluster) stats(ctx context.Context, consistent bool) (*Stats, error) {
	return call(c, ctx, "stats", "", idempotent, func(conn *Conn, _ *bool) (*Stats, error) { return conn.stats(ctx, consistent) })
}

// requestID returns a new request id for a request on key, and the retry
// class it allows: byID, or once when the key leaves no room for the id
// on its line.
func (c *Cluster) requestID(key string) (string, retry) {
	id := c.ids.forLine(key)
	if id == "" {
		return "", once
	}
	return id, byID
}

func (c *Cluster) acquire(ctx context.Context, k cmds, key string, limit int, timeout, ttl time.Duration) (Grant, error) {
	rid, r := c.requestID(key)
	return call(c, ctx, k.acquire.String(), key, r, func(conn *Conn, sent *bool) (Grant, error) {
		return conn.acquireSent(ctx, k, key, rid, limit, timeout, ttl, sent)
	})
}

func (c *Cluster) enqueue(ctx context.Context, k cmds, key string, limit int, ttl time.Duration) (Grant, bool, error) {
	var (
		g        Grant
		acquired bool
	)
	rid, r := c.requestID(key)
	err := c.do(ctx, k.enqueue.String(), key, r, func(conn *Conn, sent *bool) error {
		var err error
		g, acquired, err = conn.enqueueSent(ctx, k, key, rid, limit, ttl, sent)
		return err
	})
	return g, acquired, err
}

func (c *Cluster) wait(ctx context.Context, k cmds, key string, timeout time.Duration) (Grant, error) {
	rid, r := c.requestID(key)
	return call(c, ctx, k.wait.String(), key, r, func(conn *Conn, sent *bool) (Grant, error) {
		return conn.waitSent(ctx, k, key, rid, timeout, sent)
	})
}

func (c *Cluster) release(ctx context.Context, k cmds, key, token string) error {
	unsure := false // an earlier attempt may have released it
	rid, _ := c.requestID(key)
	return c.do(ctx, k.release.String(), key, idempotent, func(conn *Conn, _ *bool) error {
		err := conn.releaseID(ctx, k, key, rid, token)
		var nl *NotLeaderError
		switch {
		case err == nil, errors.As(err, &nl):
		case errors.Is(err, ErrNotHolder) && unsure:
			// The attempt whose connection broke released it (or the
			// lease ran out meanwhile): either way it is not held.
			return nil
		case !answer(err):
			unsure = true
		}
		return err
	})
}

func (c *Cluster) renew(ctx context.Context, k cmds, key, token string, ttl time.Duration) (time.Duration, error) {
	rid, _ := c.requestID(key)
	return call(c, ctx, k.renew.String(), key, takesOver, func(conn *Conn, _ *bool) (time.Duration, error) {
		return conn.renewID(ctx, k, key, rid, token, ttl)
	})
}

// retry says when an operation may run again after a failure.
type retry int

const (
	// idempotent: after any failure (release, renew, stats).
	idempotent retry = iota
	// once: only if the server did not run it (acquire, enqueue, wait
	// without a request id).
	once
	// byID: after any failure but a canceled context, with the request
	// id the first attempt carried (acquire, enqueue, wait).
	byID
	// takesOver: as idempotent; once answered, the connection owns what
	// it named (renew).
	takesOver
)

// do runs op on the current connection, reconnecting and retrying within
// the budget. op reports through sent whether its request was completely
// written.
func (c *Cluster) do(ctx context.Context, cmd, key string, r retry, op func(conn *Conn, sent *bool) error) error {
	var (
		last  error  // why the last attempt failed
		hint  string // the leader the last answer named
		pause bool   // back off before the next attempt
	)
	for attempt := 1; ; attempt++ {
		if attempt > c.o.maxAttempts {
			return fmt.Errorf("%w: %s %s: gave up after %d attempts: %w", ErrNoLeader, cmd, key, attempt-1, last)
		}
		if pause {
			if err := c.backoff(ctx, attempt-1); err != nil {
				return fmt.Errorf("%w: %s %s: gave up after %d attempts: %w; last error: %w", ErrNoLeader, cmd, key, attempt-1, err, last)
			}
		}
		conn, err := c.connect(ctx, hint)
		if err != nil {
			if last != nil && deadlinePassed(ctx) {
				// The budget ran out while dialing (the dial's deadline
				// can fire before ctx's own timer): the answers so far
				// say more than the cut dial.
				return fmt.Errorf("%w: %s %s: gave up after %d attempts: %w; last error: %w", ErrNoLeader, cmd, key, attempt-1, context.DeadlineExceeded, last)
			}
			if ctx.Err() != nil || errors.Is(err, ErrAuth) || errors.Is(err, ErrBadRequest) || errors.Is(err, ErrClosed) {
				return err // the caller's deadline, or not worth retrying
			}
			last, hint, pause = err, "", true
			continue
		}
		if h, ok := c.unattached(conn); ok && r == byID {
			c.leave(conn)
			last, hint, pause = fmt.Errorf("%w: %s does not act for the session", ErrNoLeader, conn.Addr()), h, h == ""
			continue
		}
		sent := false
		err = op(conn, &sent)
		var nl *NotLeaderError
		if r != idempotent && (err == nil || (sent && !errors.As(err, &nl))) {
			c.owns(conn)
		}
		switch {
		case err == nil:
			return nil
		case errors.As(err, &nl):
			// Not run: safe to retry anywhere. An answer naming another
			// node is followed at once; one naming nobody (an election is
			// under way) or this node backs off and tries the next seed.
			// A connection that may own a grant stays open (leave).
			c.leave(conn)
			last, hint = err, nl.Leader
			if hint == conn.Addr() {
				hint = ""
			}
			pause = hint == ""
			continue
		case answer(err):
			return err
		}
		// The connection failed: an I/O error, a garbled answer, the
		// caller's context. It is closed already; forget it.
		c.retire(conn)
		if sent && (r == once || (r == byID && ctx.Err() != nil)) {
			return fmt.Errorf("%w: %s %s at %s: %w", ErrUnknownOutcome, cmd, key, conn.Addr(), err)
		}
		if ctx.Err() != nil && last != nil {
			// The budget ran out in an attempt: the answers before it
			// say more than the cut one.
			return fmt.Errorf("%w: %s %s: gave up after %d attempts: %w; last error: %w", ErrNoLeader, cmd, key, attempt, err, last)
		}
		if ctx.Err() != nil || errors.Is(err, ErrProtocol) {
			return err
		}
		last, hint, pause = err, "", true
	}
}

// deadlinePassed reports whether ctx is done or its deadline has come,
// even if its timer has not fired yet.
func deadlinePassed(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// answer reports whether err is the server's answer (or the client's
// refusal to send), as opposed to a failure of the connection.
func answer(err error) bool {
	return slices.ContainsFunc([]error{ErrTimeout, ErrMaxLocks, ErrMaxWaiters, ErrLimitMismatch, ErrNotHolder,
		ErrNotQueued, ErrAlreadyQueued, ErrBadRequest, ErrAuth}, func(e error) bool { return errors.Is(err, e) })
}

// backoff sleeps before attempt n+1: base * 2^(n-1), at most the cap, less
// a random part of up to half. It fails at once when the sleep would
// outlast ctx.
func (c *Cluster) backoff(ctx context.Context, n int) error {
	d := max(c.o.backoffBase, 0)
	for i := 1; i < n && d < c.o.backoffMax; i++ {
		d *= 2
	}
	d = min(d, max(c.o.backoffMax, 0))
	if d > 0 {
		d -= rand.N(d/2 + 1)
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return fmt.Errorf("%w before the next attempt", context.DeadlineExceeded)
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// connect returns the current connection, or dials one: to hint, the
// leader an answer named, else to the next seed.
func (c *Cluster) connect(ctx context.Context, hint string) (*Conn, error) {
	if conn, err := c.current(); conn != nil || err != nil {
		return conn, err
	}
	select {
	case c.dialing <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.dialing }()
	if conn, err := c.current(); conn != nil || err != nil {
		return conn, err // another call connected meanwhile
	}
	addr := hint
	if addr == "" {
		c.mu.Lock()
		addr = c.seeds[c.next]
		c.next = (c.next + 1) % len(c.seeds)
		c.mu.Unlock()
	}
	conn, err := Dial(ctx, addr, c.opts...)
	if err != nil {
		return nil, err
	}
	c.attach(ctx, conn)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = conn.Close() // nothing was sent on it
		return nil, fmt.Errorf("%w: cluster client closed", ErrClosed)
	}
	c.conn = conn
	return conn, nil
}

// current returns the current connection if it is usable; a closed one is
// forgotten.
func (c *Cluster) current() (*Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("%w: cluster client closed", ErrClosed)
	}
	if c.conn != nil && c.conn.Err() != nil {
		c.conn = nil
	}
	return c.conn, nil
}

// retire stops using conn and closes it once the requests already in
// flight on it are answered: another goroutine's request on a follower
// gets its not-leader answer rather than a broken connection, which would
// leave its outcome unknown.
func (c *Cluster) retire(conn *Conn) {
	c.mu.Lock()
	if c.conn == conn {
		c.conn = nil
	}
	delete(c.owning, conn)
	c.mu.Unlock()
	if conn.Err() != nil {
		return
	}
	go conn.closeIdle()
}

// closeIdle closes the Conn after the request in flight, if any; requests
// queued behind it may run first.
func (c *Conn) closeIdle() {
	c.turn <- struct{}{}
	defer func() { <-c.turn }()
	_ = c.Close() // nobody waits for this error
}

// compile-time checks: both kinds of connection carry the commands.
var (
	_ commander = (*Conn)(nil)
	_ commander = (*Cluster)(nil)
)
