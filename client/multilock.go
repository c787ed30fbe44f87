package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// MultiLock holds many keys at once, all or none (Redisson's MultiLock,
// Curator's multi-lock): locks, or with Limit > 1 a slot of each of as many
// semaphores. It is Lock for a set of keys: set the fields, then Acquire
// and Release; the leases of all keys are renewed together in the
// background, and if any renewal fails the whole set is lost: Lost is
// closed and Err says why.
//
// All keys go to one server: ServerFor(Servers, Keys[0]), or with Cluster
// set the cluster's leader. Each key has its own fencing token (Tokens,
// Fences), in the order of Keys. Acquire, Release are serialised; the
// other methods may be called from any goroutine. A MultiLock must not be
// copied after first use.
type MultiLock struct {
	// Keys are the keys, distinct, 1 to MaxKeys, fitting one protocol
	// line (256 bytes) joined by spaces.
	Keys []string
	// Limit is each key's semaphore limit; 0 or 1 takes locks.
	Limit int
	// AcquireTimeout, LeaseTTL, Servers, Cluster, AuthToken, TLSConfig and
	// Options are as for Lock.
	AcquireTimeout time.Duration
	LeaseTTL       int
	Servers        []string
	Cluster        []string
	AuthToken      string
	TLSConfig      *tls.Config
	Options        []Option

	op   sync.Mutex
	mu   sync.Mutex
	cur  *heldSet
	lost chan struct{}
}

// heldSet is one granted set and its renewal goroutine.
type heldSet struct {
	conn   commander
	k      cmds
	keys   []string
	grants []Grant
	end    atomic.Pointer[time.Time] // the leases' local end
	stop   chan struct{}
	done   chan struct{}
	lost   chan struct{}
	once   sync.Once
	err    error
}

func (m *MultiLock) slots() (slots, cmds) {
	k, limit := lockCmds, 1
	if m.Limit > 1 {
		k, limit = semCmds, m.Limit
	}
	var first string
	if len(m.Keys) > 0 {
		first = m.Keys[0]
	}
	return slots{k: k, key: first, limit: limit, timeout: m.AcquireTimeout, ttlSeconds: m.LeaseTTL,
		servers: m.Servers, cluster: m.Cluster, auth: m.AuthToken, tls: m.TLSConfig, opts: m.Options}, k
}

// Acquire waits up to AcquireTimeout for all the keys. It returns true
// when it holds them all, false (and a nil error) when the wait timed out:
// then it holds none. Canceling ctx abandons the wait.
func (m *MultiLock) Acquire(ctx context.Context) (bool, error) {
	w, k := m.slots()
	if _, err := checkKeys(m.Keys, w.limit); err != nil {
		return false, err
	}
	if w.ttlSeconds < 0 {
		return false, fmt.Errorf("%w: lease TTL %d s < 0", ErrBadRequest, w.ttlSeconds)
	}
	m.op.Lock()
	defer m.op.Unlock()
	if err := m.idle(); err != nil {
		return false, err
	}
	c, err := w.dial(ctx)
	if err != nil {
		return false, err
	}
	keys := append([]string(nil), m.Keys...)
	sent := time.Now()
	gs, err := c.acquireMany(ctx, k, keys, w.limit, w.timeout, w.ttl())
	if err != nil {
		_ = c.Close() // nothing held, or the server releases what it granted
		if errors.Is(err, ErrTimeout) {
			return false, nil
		}
		return false, err
	}
	h := &heldSet{conn: c, k: k, keys: keys, grants: gs, stop: make(chan struct{}), done: make(chan struct{})}
	end := sent.Add(gs[0].TTL)
	if time.Until(end) < gs[0].TTL/2 {
		// Granted late (it waited): renew first, so the end is known.
		if end, err = h.renewAll(ctx); err != nil {
			_ = c.Close()
			return false, fmt.Errorf("%w: renewing after a late grant: %w", ErrLost, err)
		}
	}
	h.end.Store(&end)
	m.mu.Lock()
	h.lost = m.lostLocked()
	m.cur = h
	m.mu.Unlock()
	go h.renew()
	return true, nil
}

// renewAll renews every key and returns the leases' new local end.
func (h *heldSet) renewAll(ctx context.Context) (time.Time, error) {
	sent := time.Now()
	var least time.Duration
	for i, key := range h.keys {
		rem, err := h.conn.renew(ctx, h.k, key, h.grants[i].Token, h.grants[i].TTL)
		if err != nil {
			return time.Time{}, fmt.Errorf("renew %s: %w", key, err)
		}
		if i == 0 || rem < least {
			least = rem
		}
	}
	return sent.Add(least), nil
}

// renew renews the set at half its TTL until Release stops it or a
// renewal fails, which loses the whole set.
func (h *heldSet) renew() {
	defer close(h.done)
	ttl := h.grants[0].TTL
	t := time.NewTimer(time.Until(h.end.Load().Add(-ttl / 2)))
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithDeadline(context.Background(), *h.end.Load())
		end, err := h.renewAll(ctx)
		cancel()
		if err != nil {
			h.once.Do(func() { h.err = fmt.Errorf("client: %w", err); close(h.lost) })
			_ = h.conn.Close() // the server drops what is left
			return
		}
		h.end.Store(&end)
		t.Reset(time.Until(end.Add(-ttl / 2)))
	}
}

func (h *heldSet) isLost() bool {
	select {
	case <-h.lost:
		return true
	default:
		return false
	}
}

// Release releases every key and stops renewal. It returns an error
// wrapping ErrLost if the set was lost before, ErrNotHeld if nothing was
// held, or the first key's release error.
func (m *MultiLock) Release(ctx context.Context) error {
	m.op.Lock()
	defer m.op.Unlock()
	m.mu.Lock()
	h := m.cur
	m.cur = nil
	m.resetLostLocked()
	m.mu.Unlock()
	if h == nil {
		return ErrNotHeld
	}
	close(h.stop)
	<-h.done
	m.mu.Lock()
	m.resetLostLocked()
	m.mu.Unlock()
	defer h.conn.Close()
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

// idle makes sure nothing is held; a lost set is cleared. op is held.
func (m *MultiLock) idle() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != nil && !m.cur.isLost() {
		return ErrHeld
	}
	if m.cur != nil {
		_ = m.cur.conn.Close()
		m.cur = nil
		m.resetLostLocked()
	}
	return nil
}

func (m *MultiLock) resetLostLocked() {
	if m.lost == nil {
		return
	}
	select {
	case <-m.lost:
		m.lost = nil
	default:
	}
}

func (m *MultiLock) lostLocked() chan struct{} {
	if m.lost == nil {
		m.lost = make(chan struct{})
	}
	return m.lost
}

func (m *MultiLock) current() *heldSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

// Lost returns a channel closed when the current set is lost (any of its
// leases). Before a grant and after Release it is the next grant's.
func (m *MultiLock) Lost() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lostLocked()
}

// Err returns why the current set was lost, or nil.
func (m *MultiLock) Err() error {
	if h := m.current(); h != nil && h.isLost() {
		return h.err
	}
	return nil
}

// Held reports whether the set is held, not lost, and its leases have not
// run out on the local clock.
func (m *MultiLock) Held() bool {
	h := m.current()
	return h != nil && !h.isLost() && time.Now().Before(*h.end.Load())
}

// Tokens returns the fencing tokens of the current set, in the order of
// Keys, or nil when nothing is held.
func (m *MultiLock) Tokens() []string {
	h := m.current()
	if h == nil {
		return nil
	}
	out := make([]string, len(h.grants))
	for i, g := range h.grants {
		out[i] = g.Token
	}
	return out
}

// Fences returns the fence numbers of the current set, in the order of
// Keys, or nil.
func (m *MultiLock) Fences() []uint64 {
	h := m.current()
	if h == nil {
		return nil
	}
	out := make([]uint64, len(h.grants))
	for i, g := range h.grants {
		out[i] = g.Fence()
	}
	return out
}
