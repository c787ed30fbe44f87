package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/fence"
)

// Mux runs many goroutines' requests over a few connections in tagged
// mode (docs/protocol.md "Tagged mode"): each request carries a tag, the
// server answers each when it is ready, and a waiting acquire holds back
// nothing. On each connection, the caller that finds no write under way
// sends every request queued so far in one write, and again while more
// were queued during it; a reader goroutine hands each answer to its
// caller, and sends in one write what the callers it woke ask next. A
// key's requests all go over one connection (picked by its hash).
//
// A Mux acts for one session, attached to each of its connections, when
// the server offers sessions (--orphan-ttl above 0): what it holds
// survives a broken connection, which the Mux dials again (to the next of
// its addresses, after a failover) and attaches the session to. Without
// sessions each connection is its own owner, and what a broken one held is
// released: the leases on it are lost, and their Lost channels say so at
// their next renewal. With a session every mutating request carries a
// request id, and a waiting one whose connection breaks is sent again
// with it on the next connection, taking over its place or its grant
// (muxretry.go).
//
// Use a Mux directly (Acquire, Release, AcquireMany, ... as on a Conn), or
// set it as the Mux of a Lock, Semaphore, Election or MultiLock: they then
// share its connections instead of dialling one per grant. Enqueue and
// Wait act for the whole Mux (its session), so two goroutines must not
// enqueue the same key at once. An acquire, wait or set whose context
// ends while it waits is withdrawn from the server's queue with the tagged
// cancel request (muxcancel.go), and abandoned: a grant that crossed the
// cancel is released.
type Mux struct {
	commands

	addrs []string
	opts  options
	conns []*muxConn
	next  atomic.Uint32
	ids   requestIDs // with a session, every mutating request carries one

	mu      sync.Mutex
	session string        // "" for none
	orphan  time.Duration // the session's orphan TTL
	noSess  bool          // the server offers no sessions
	dedup   int           // whether the server de-duplicates request ids (muxdedup.go)
	closed  bool
	quit    chan struct{}
}

// DialMux opens n tagged connections to the first of addrs that answers,
// and a session for them when the server offers sessions. On a broken
// connection it tries addrs in turn.
func DialMux(ctx context.Context, addrs []string, n int, opts ...Option) (*Mux, error) {
	if len(addrs) == 0 {
		addrs = []string{DefaultAddr}
	}
	o := newOptions(opts)
	m := &Mux{addrs: addrs, opts: o, quit: make(chan struct{})}
	m.commands = commands{m}
	m.ids.init()
	for i := range max(n, 1) {
		mc := &muxConn{m: m, addr: i % len(addrs), pending: make(map[uint64]*muxCall)}
		if err := mc.connectAny(ctx); err != nil {
			_ = m.Close()
			return nil, err
		}
		m.conns = append(m.conns, mc)
		go mc.run()
	}
	if every := m.pingEvery(); every > 0 {
		go m.keepalive(every)
	}
	if m.Session() != "" {
		_, _ = m.dedupes(ctx) // unknown on an error: ids are sent, and it asks again
	}
	return m, nil
}

// Session returns the id of the session the Mux acts for, "" for none.
func (m *Mux) Session() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.session
}

// Close closes the session (releasing what it holds) and the connections.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	sess := m.session
	m.mu.Unlock()
	if sess != "" {
		ctx, cancel := context.WithTimeout(context.Background(), closeSessionWait)
		_, _ = m.call(ctx, codec.CmdSession, sess, []byte(codec.SessionClose), 0)
		cancel()
	}
	m.mu.Lock()
	m.closed = true
	close(m.quit)
	m.mu.Unlock()
	for _, c := range m.conns {
		c.shut(ErrClosed)
	}
	return nil
}

func (m *Mux) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// pingEvery is how often the keepalive runs: with a session, a quarter of
// its orphan TTL; else every 5 s, to find dead connections.
func (m *Mux) pingEvery() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.session == "" {
		return 5 * time.Second
	}
	return pingEvery(m.orphan)
}

// keepalive attaches the session again on every connection each period
// (or, without one, sends stats): it keeps the session alive and finds a
// dead connection, which the check's timeout breaks.
func (m *Mux) keepalive(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.quit:
			return
		case <-t.C:
		}
		for _, c := range m.conns {
			ctx, cancel := context.WithTimeout(context.Background(), 2*every)
			var err error
			if sess := m.Session(); sess != "" {
				_, err = c.do(ctx, codec.CmdSession, sess, "", nil, 0)
			}
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				c.broken(fmt.Errorf("%w: keepalive unanswered", ErrClosed))
			}
		}
	}
}

// call runs one request on one of the Mux's connections, waiting for one
// to come up while ctx allows. A key's requests go to the connection its
// hash picks while it is up (the next one up else): on a busy key a
// release, its answer and the grant it makes for the next waiter of the
// Mux then share one connection, so they share the server's writes and
// the reader's reads. Requests without a key go round robin.
func (m *Mux) call(ctx context.Context, cmd codec.Cmd, key string, arg []byte, wait time.Duration) (reply, error) {
	return m.callHome(ctx, key, cmd, key, "", arg, wait)
}

// callHome is call with the connection picked by home's hash, not key's,
// and the request id rid ("" for none).
func (m *Mux) callHome(ctx context.Context, home string, cmd codec.Cmd, key, rid string, arg []byte, wait time.Duration) (reply, error) {
	c, err := m.upConn(ctx, home, cmd)
	if err != nil {
		return reply{}, err
	}
	return c.do(ctx, cmd, key, rid, arg, wait)
}

// upConn returns the connection up that a request on home goes to,
// waiting for one to come up while ctx allows.
func (m *Mux) upConn(ctx context.Context, home string, cmd codec.Cmd) (*muxConn, error) {
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		if m.isClosed() {
			return nil, ErrClosed
		}
		start := m.next.Add(1)
		if cmd != codec.CmdSession && cmd != codec.CmdStats {
			start = homeConn(home, len(m.conns))
		}
		for i := range uint32(len(m.conns)) {
			if c := m.conns[(start+i)%uint32(len(m.conns))]; c.up() {
				return c, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
	}
}

// homeSeed seeds the hash that picks a key's connection.
var homeSeed = maphash.MakeSeed()

// homeConn returns the index of the connection, of n, that key's requests
// go to while it is up.
func homeConn(key string, n int) uint32 {
	return uint32(maphash.String(homeSeed, key) % uint64(n))
}

// retry runs an idempotent request (a renewal, a release) until it is
// answered, across reconnections, while ctx allows: with a session, a
// broken connection loses nothing, and the request is sent again on the
// next one (after a failover, on the new leader). Without a session, the
// first error stands. With a session it carries a request id, the same
// on every attempt: a retried release answers what the first one did.
func (m *Mux) retry(ctx context.Context, cmd codec.Cmd, key string, arg []byte) (reply, error) {
	rid := m.requestID(key)
	for {
		r, err := m.callHome(ctx, key, cmd, key, rid, arg, 0)
		if !resend(r, err) || m.Session() == "" || m.isClosed() || ctx.Err() != nil {
			return r, err
		}
		if pause(ctx) != nil {
			return reply{}, err
		}
	}
}

func (m *Mux) acquire(ctx context.Context, k cmds, key string, limit int, timeout, ttl time.Duration) (Grant, error) {
	if err := checkKey(key, limit); err != nil {
		return Grant{}, err
	}
	var rest []byte
	if k.sem {
		rest = strconv.AppendInt(nil, int64(limit), 10)
	}
	r, err := m.send(ctx, muxReq{cmd: k.acquire, home: key, key: key, id: m.requestID(key), timeout: timeout,
		rest: appendTTL(rest, ttl)})
	if err != nil {
		return Grant{}, err
	}
	return muxGrant(r, codec.StatusOK, fmt.Errorf("%w: bare error to an acquire", ErrProtocol))
}

func (m *Mux) enqueue(ctx context.Context, k cmds, key string, limit int, ttl time.Duration) (Grant, bool, error) {
	if err := checkKey(key, limit); err != nil {
		return Grant{}, false, err
	}
	var b [64]byte
	arg := b[:0]
	if k.sem {
		arg = strconv.AppendInt(arg, int64(limit), 10)
	}
	arg = appendTTL(arg, ttl)
	r, err := m.send(ctx, muxReq{cmd: k.enqueue, home: key, key: key, id: m.requestID(key), timeout: -1, rest: arg})
	if err != nil {
		return Grant{}, false, err
	}
	if r.Status == codec.StatusQueued {
		return Grant{}, false, nil
	}
	g, err := muxGrant(r, codec.StatusAcquired, ErrAlreadyQueued)
	return g, err == nil, err
}

func (m *Mux) wait(ctx context.Context, k cmds, key string, timeout time.Duration) (Grant, error) {
	if err := checkKey(key, 1); err != nil {
		return Grant{}, err
	}
	r, err := m.send(ctx, muxReq{cmd: k.wait, home: key, key: key, id: m.requestID(key), timeout: timeout})
	if err != nil {
		return Grant{}, err
	}
	return muxGrant(r, codec.StatusOK, ErrNotQueued)
}

func (m *Mux) release(ctx context.Context, k cmds, key, token string) error {
	if err := checkKeyToken(key, token); err != nil {
		return err
	}
	r, err := m.retry(ctx, k.release, key, []byte(token))
	if err != nil {
		return err
	}
	if r.Status != codec.StatusOK || r.Body != "" {
		return errorFor(r, ErrNotHolder)
	}
	return nil
}

func (m *Mux) renew(ctx context.Context, k cmds, key, token string, ttl time.Duration) (time.Duration, error) {
	if err := checkKeyToken(key, token); err != nil {
		return 0, err
	}
	r, err := m.retry(ctx, k.renew, key, appendTTL([]byte(token), ttl))
	if err != nil {
		return 0, err
	}
	if r.Status != codec.StatusOK || r.Token != "" {
		return 0, errorFor(r, ErrNotHolder)
	}
	return time.Duration(r.N) * time.Second, nil
}

func (m *Mux) stats(ctx context.Context, consistent bool) (*Stats, error) {
	key := "_"
	if consistent {
		key = "consistent"
	}
	r, err := m.call(ctx, codec.CmdStats, key, []byte("_"), 0)
	if err != nil {
		return nil, err
	}
	return decodeStats(r)
}

// muxGrant is Conn.grant for a Mux's answer: an answer never breaks a Mux.
func muxGrant(r reply, ok codec.Status, onError error) (Grant, error) {
	if r.Status != ok {
		return Grant{}, errorFor(r, onError)
	}
	if !validGrant(r) {
		return Grant{}, fmt.Errorf("%w: bad grant %q %d", ErrProtocol, r.Token, r.N)
	}
	return Grant{Token: r.Token, TTL: time.Duration(r.N) * time.Second}, nil
}

// muxUse is a Mux as the connection of one Lock, Semaphore or Election
// grant: closing it leaves the Mux open for the others.
type muxUse struct{ *Mux }

// Close implements commander: the Mux outlives the grant.
func (muxUse) Close() error { return nil }

// validGrant reports whether r carries a well-formed grant.
func validGrant(r reply) bool {
	_, err := fence.ParseString(r.Token)
	return err == nil && r.N > 0
}

// decodeStats decodes a stats answer.
func decodeStats(r reply) (*Stats, error) {
	if r.Status != codec.StatusOK {
		return nil, errorFor(r, ErrProtocol)
	}
	st := new(Stats)
	if err := json.Unmarshal([]byte(r.Body), st); err != nil {
		return nil, fmt.Errorf("%w: stats: %v", ErrProtocol, err)
	}
	return st, nil
}
