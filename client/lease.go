package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/fence"
)

// ServerFor returns the server that owns key: servers[crc32(key) % n], the
// IEEE CRC-32 rule dflockd's clients use, so every client in any language
// sends a key to the same server. With no servers it returns DefaultAddr.
func ServerFor(servers []string, key string) string {
	if len(servers) == 0 {
		return DefaultAddr
	}
	return servers[crc32.ChecksumIEEE([]byte(key))%uint32(len(servers))]
}

// FenceFromToken returns the fence number of a token: a uint64 that grows
// with every grant, to store beside the data the lease protects.
func FenceFromToken(token string) (uint64, error) {
	return fence.FenceOf(token)
}

// slots is what a Lock, Semaphore or Election asks for: limit slots of
// key on the commands k, with the fields of Lock that say how and where.
// A MultiLock sets keys, all of them, and key to the first.
type slots struct {
	k          cmds
	key        string
	keys       []string
	limit      int
	timeout    time.Duration
	ttlSeconds int
	servers    []string
	cluster    []string
	auth       string
	tls        *tls.Config
	opts       []Option
	mux        *Mux
}

func (w slots) ttl() time.Duration { return time.Duration(w.ttlSeconds) * time.Second }

// keyList returns the keys of one grant: keys, or key alone.
func (w slots) keyList() []string {
	if w.keys != nil {
		return w.keys
	}
	return []string{w.key}
}

// dial opens the connection of one grant: a Cluster, or a Conn to the
// key's server.
func (w slots) dial(ctx context.Context) (commander, error) {
	if w.mux != nil {
		return muxUse{w.mux}, nil
	}
	opts := append([]Option{WithAuthToken(w.auth), WithTLS(w.tls)}, w.opts...)
	if len(w.cluster) > 0 {
		return DialCluster(ctx, w.cluster, opts...)
	}
	return Dial(ctx, ServerFor(w.servers, w.key), opts...)
}

// lease is the one implementation behind Lock, Semaphore, Election and
// MultiLock: a connection per grant, a renewal goroutine per grant, and
// the Lost signal.
//
// op serialises Acquire, Enqueue, Wait and Release; mu guards the fields
// the accessors read. op is taken before mu, never the other way round, and
// nothing blocks while mu is held.
type lease struct {
	op sync.Mutex

	mu     sync.Mutex
	queued commander     // enqueued, waiting for Wait
	cur    *held         // the current grant, possibly lost
	lost   chan struct{} // the current grant's, or the next one's

	renewHook func(context.Context) // tests only: runs before each renewal
}

// held is one grant, of one key or of a MultiLock's keys, and its renewal
// goroutine.
type held struct {
	conn    commander
	k       cmds
	keys    []string
	grants  []Grant                   // in the order of keys
	fromEnd bool                      // MultiLock: renew at end - TTL/2, not halfway through the renewed lease
	end     atomic.Pointer[time.Time] // the lease's local end: a request's send time + its TTL

	stop chan struct{} // closed by Release
	done chan struct{} // closed when the renewal goroutine exits
	lost chan struct{} // closed when the lease is lost
	once sync.Once
	err  error // why it was lost; written before lost is closed
}

func (h *held) markLost(err error) {
	h.once.Do(func() {
		h.err = err
		close(h.lost)
	})
}

// until returns the lease's local end.
func (h *held) until() time.Time { return *h.end.Load() }

func (h *held) extend(end time.Time) { h.end.Store(&end) }

func (h *held) isLost() bool {
	select {
	case <-h.lost:
		return true
	default:
		return false
	}
}

func (l *lease) acquire(ctx context.Context, w slots) (bool, error) {
	return l.open(ctx, w, func(c commander) ([]Grant, bool, error) {
		g, err := c.acquire(ctx, w.k, w.key, w.limit, w.timeout, w.ttl())
		return []Grant{g}, true, err
	})
}

func (l *lease) enqueue(ctx context.Context, w slots) (bool, error) {
	return l.open(ctx, w, func(c commander) ([]Grant, bool, error) {
		g, granted, err := c.enqueue(ctx, w.k, w.key, w.limit, w.ttl())
		return []Grant{g}, granted, err
	})
}

// open dials the connection of one grant and runs ask on it, which
// returns the grants of w's keys, or granted false when it only enqueued:
// the connection is then kept for wait.
func (l *lease) open(ctx context.Context, w slots, ask func(commander) (gs []Grant, granted bool, err error)) (bool, error) {
	if w.ttlSeconds < 0 {
		return false, fmt.Errorf("%w: lease TTL %d s < 0", ErrBadRequest, w.ttlSeconds)
	}
	l.op.Lock()
	defer l.op.Unlock()
	if err := l.idle(); err != nil {
		return false, err
	}
	c, err := w.dial(ctx)
	if err != nil {
		return false, err
	}
	sent := time.Now()
	gs, granted, err := ask(c)
	if err == nil && !granted {
		l.mu.Lock()
		l.queued = c
		l.mu.Unlock()
		return false, nil
	}
	return l.settle(ctx, c, w, gs, sent, err)
}

func (l *lease) wait(ctx context.Context, w slots, timeout time.Duration) (bool, error) {
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	c := l.queued
	l.queued = nil
	l.mu.Unlock()
	if c == nil {
		return false, ErrNotHeld
	}
	sent := time.Now()
	g, err := c.wait(ctx, w.k, w.key, timeout)
	return l.settle(ctx, c, w, []Grant{g}, sent, err)
}

// settle ends an acquire or a wait on c: a grant is started; after an
// error c is closed (nothing is held on it, the queue entry is gone, or
// with the outcome unknown the server releases what it granted), and a
// timeout is a false return.
func (l *lease) settle(ctx context.Context, c commander, w slots, gs []Grant, sent time.Time, err error) (bool, error) {
	if err != nil {
		_ = c.Close()
		if errors.Is(err, ErrTimeout) {
			return false, nil
		}
		return false, err
	}
	if err := l.start(ctx, c, w, gs, sent); err != nil {
		return false, err
	}
	return true, nil
}

func (l *lease) release(ctx context.Context) error {
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	h, q := l.cur, l.queued
	l.cur, l.queued = nil, nil
	l.resetLostLocked()
	l.mu.Unlock()
	if q != nil {
		return q.Close() // withdraws the wait
	}
	if h == nil {
		return ErrNotHeld
	}
	close(h.stop)
	<-h.done
	// The renewer may have closed lost while it stopped: reset again now
	// that it is gone, so the next grant never inherits a closed channel.
	l.mu.Lock()
	l.resetLostLocked()
	l.mu.Unlock()
	defer h.conn.Close() // after the release, or to let the server release
	if h.isLost() {
		return fmt.Errorf("%w: %w", ErrLost, h.err)
	}
	var first error
	for i, key := range h.keys {
		if err := h.conn.release(ctx, h.k, key, h.grants[i].Token); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// idle makes sure nothing is held or queued; a lost grant is cleared.
// op must be held.
func (l *lease) idle() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queued != nil || (l.cur != nil && !l.cur.isLost()) {
		return ErrHeld
	}
	if l.cur != nil {
		_ = l.cur.conn.Close() // already broken or closed by the renewal goroutine
		l.cur = nil
		l.resetLostLocked()
	}
	return nil
}

// resetLostLocked drops a closed lost channel so the next grant gets a
// fresh one.
func (l *lease) resetLostLocked() {
	if l.lost == nil {
		return
	}
	select {
	case <-l.lost:
		l.lost = nil
	default:
	}
}

func (l *lease) lostChan() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = make(chan struct{})
	}
	return l.lost
}

// start records a grant and starts renewing it. sent is when the request
// that got gs was sent: the server started the leases no earlier, so their
// local end, sent + TTL, is never later than the server's.
//
// A grant that arrives with less than half of that left (it waited in the
// queue: the lease began at some unknown time since sent) is renewed at
// once, so the lease's end is known again before the caller is told it
// holds. If that renewal fails, the grant is dropped and start returns an
// error wrapping ErrLost.
func (l *lease) start(ctx context.Context, c commander, w slots, gs []Grant, sent time.Time) error {
	h := &held{
		conn:    c,
		k:       w.k,
		keys:    w.keyList(),
		grants:  gs,
		fromEnd: w.keys != nil,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	end := sent.Add(gs[0].TTL)
	if time.Until(end) < gs[0].TTL/2 {
		var err error
		if end, _, err = h.renewAll(ctx); err != nil {
			_ = c.Close() // the server releases what is left
			return fmt.Errorf("%w: renewing after a late grant: %w", ErrLost, err)
		}
	}
	h.lost = l.lostChan()
	h.extend(end)
	l.mu.Lock()
	l.cur = h
	hook := l.renewHook
	l.mu.Unlock()
	go h.renew(hook)
	return nil
}

// renewAll renews every key and returns the leases' new local end and the
// least TTL the server gave.
func (h *held) renewAll(ctx context.Context) (time.Time, time.Duration, error) {
	sent := time.Now()
	var least time.Duration
	for i, key := range h.keys {
		rem, err := h.conn.renew(ctx, h.k, key, h.grants[i].Token, h.grants[i].TTL)
		if err != nil {
			return time.Time{}, 0, fmt.Errorf("renew %s: %w", key, err)
		}
		if i == 0 || rem < least {
			least = rem
		}
	}
	return sent.Add(least), least, nil
}

// renew keeps the lease alive, renewing at half its TTL, until Release
// stops it or a renewal fails. A renewal must finish before the lease's
// local end (measured from when the grant's request or the last renewal
// was sent), or the lease counts as lost: by then the server may have
// granted it to someone else. A MultiLock's set is lost with any key.
func (h *held) renew(hook func(context.Context)) {
	defer close(h.done)
	ttl := h.grants[0].TTL
	t := time.NewTimer(time.Until(h.until().Add(-ttl / 2)))
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithDeadline(context.Background(), h.until())
		if hook != nil {
			hook(ctx)
		}
		end, rem, err := h.renewAll(ctx)
		cancel()
		if err != nil {
			h.markLost(fmt.Errorf("client: %w", err))
			_ = h.conn.Close() // let the server drop whatever is left
			return
		}
		h.extend(end)
		next := end.Add(-rem / 2)
		if h.fromEnd {
			next = end.Add(-ttl / 2)
		}
		t.Reset(time.Until(next))
	}
}

// current returns the current grant, or nil. Its fields other than end
// never change, and err is written before lost is closed.
func (l *lease) current() *held {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

func (l *lease) token() string {
	if h := l.current(); h != nil {
		return h.grants[0].Token
	}
	return ""
}

func (l *lease) fenceNum() uint64 {
	if h := l.current(); h != nil {
		return h.grants[0].Fence()
	}
	return 0
}

func (l *lease) lostErr() error {
	if h := l.current(); h != nil && h.isLost() {
		return h.err
	}
	return nil
}

// holding reports a grant that is not lost and whose local end has not
// passed: a renewal that is late but not yet failed does not count.
func (l *lease) holding() bool {
	h := l.current()
	return h != nil && !h.isLost() && time.Now().Before(h.until())
}
