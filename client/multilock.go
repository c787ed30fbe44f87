package client

import (
	"context"
	"crypto/tls"
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
	// Mux, if set, carries the set over its connections (and its
	// session), as for Lock; Servers, Cluster, AuthToken, TLSConfig and
	// Options are then ignored.
	Mux *Mux

	l lease
}

func (m *MultiLock) slots() slots {
	k, limit := lockCmds, 1
	if m.Limit > 1 {
		k, limit = semCmds, m.Limit
	}
	var first string
	if len(m.Keys) > 0 {
		first = m.Keys[0]
	}
	return slots{k: k, key: first, keys: append([]string{}, m.Keys...), limit: limit, timeout: m.AcquireTimeout,
		ttlSeconds: m.LeaseTTL, servers: m.Servers, cluster: m.Cluster, auth: m.AuthToken, tls: m.TLSConfig, opts: m.Options,
		mux: m.Mux}
}

// Acquire waits up to AcquireTimeout for all the keys. It returns true
// when it holds them all, false (and a nil error) when the wait timed out:
// then it holds none. Canceling ctx abandons the wait.
func (m *MultiLock) Acquire(ctx context.Context) (bool, error) {
	w := m.slots()
	if _, err := checkKeys(m.Keys, w.limit); err != nil {
		return false, err
	}
	return m.l.open(ctx, w, func(c commander) ([]Grant, bool, error) {
		gs, err := c.acquireMany(ctx, w.k, w.keys, w.limit, w.timeout, w.ttl())
		return gs, true, err
	})
}

// Release releases every key and stops renewal. It returns an error
// wrapping ErrLost if the set was lost before, ErrNotHeld if nothing was
// held, or the first key's release error.
func (m *MultiLock) Release(ctx context.Context) error { return m.l.release(ctx) }

// Lost returns a channel closed when the current set is lost (any of its
// leases). Before a grant and after Release it is the next grant's.
func (m *MultiLock) Lost() <-chan struct{} { return m.l.lostChan() }

// Err returns why the current set was lost, or nil.
func (m *MultiLock) Err() error { return m.l.lostErr() }

// Held reports whether the set is held, not lost, and its leases have not
// run out on the local clock.
func (m *MultiLock) Held() bool { return m.l.holding() }

// Tokens returns the fencing tokens of the current set, in the order of
// Keys, or nil when nothing is held.
func (m *MultiLock) Tokens() []string {
	h := m.l.current()
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
	h := m.l.current()
	if h == nil {
		return nil
	}
	out := make([]uint64, len(h.grants))
	for i, g := range h.grants {
		out[i] = g.Fence()
	}
	return out
}
