package client

import (
	"context"
	"crypto/tls"
	"errors"
	"time"
)

// campaignWait is how long one acquire of a campaign waits before it is
// re-issued. Long, because a re-issued acquire joins the back of the queue.
const campaignWait = time.Hour

// Election elects one leader among the processes campaigning on Name. It
// is a Lock on the key Name: the leader holds the lock and renews it in the
// background; the others wait in the server's FIFO queue, so leadership
// passes to the longest-waiting candidate when the leader resigns, dies
// (its connection closes) or stops renewing (its lease expires).
//
// A leader must watch Lost and stop acting as leader when it closes; to
// make a deposed leader's late writes harmless, fence them with Fence.
// Campaign and Resign are serialised; Leading, Lost, Fence and Err may be
// called from any goroutine. An Election must not be copied after first
// use.
type Election struct {
	// Name is the election's key: 1 to 256 bytes without whitespace.
	Name string
	// LeaseTTL is the leader's lease in seconds; 0 means the server's
	// default. A dead leader is replaced within about this long.
	LeaseTTL  int
	Servers   []string
	Cluster   []string // seeds of a cluster; see Lock.Cluster
	AuthToken string
	TLSConfig *tls.Config
	Options   []Option
	Mux       *Mux // see Lock.Mux

	l lease
}

// Campaign blocks until this process leads, or ctx is done (then it
// returns ctx's error and leaves the queue). It returns nil at once if the
// process already leads; after a lost leadership it campaigns afresh.
// Over a Cluster, a failover while Campaign waits in the queue is retried
// with the request's id: the campaign keeps its place in the queue on the
// new leader.
func (e *Election) Campaign(ctx context.Context) error {
	if e.l.holding() {
		return nil
	}
	for {
		won, err := e.l.acquire(ctx, slots{k: lockCmds, key: e.Name, limit: 1, timeout: campaignWait,
			ttlSeconds: e.LeaseTTL, servers: e.Servers, cluster: e.Cluster, auth: e.AuthToken, tls: e.TLSConfig, opts: e.Options, mux: e.Mux})
		switch {
		case errors.Is(err, ErrHeld):
			// The lease reached its local end while a renewal was in
			// flight: it is lost, or renewed, within moments.
			select {
			case <-e.l.lostChan():
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
			}
			if e.l.holding() {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		case err != nil:
			return err
		case won:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
	}
}

// Resign gives up leadership; the next candidate in line takes over. It is
// a no-op when not leading, and returns an error wrapping ErrLost when
// leadership had already been lost.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.l.release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
		return err
	}
	return nil
}

// Leading reports whether this process leads and its lease is not lost.
func (e *Election) Leading() bool { return e.l.holding() }

// Lost returns a channel closed when leadership is lost (not when it is
// resigned); see Lock.Lost.
func (e *Election) Lost() <-chan struct{} { return e.l.lostChan() }

// Err returns why leadership was lost, or nil.
func (e *Election) Err() error { return e.l.lostErr() }

// Fence returns the fence number of the current term (0 when not
// leading): newer terms have larger fences.
func (e *Election) Fence() uint64 { return e.l.fenceNum() }

// Token returns the current term's fencing token, or "".
func (e *Election) Token() string { return e.l.token() }
