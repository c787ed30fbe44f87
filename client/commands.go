package client

import (
	"context"
	"time"
)

// commander is one implementation of the protocol's commands: a Conn (one
// server) or a Cluster (whichever node leads, retrying as Cluster says).
// A lease holds either: the engine renews and releases by key and token,
// whatever the connection.
type commander interface {
	acquire(ctx context.Context, k cmds, key string, limit int, timeout, ttl time.Duration) (Grant, error)
	acquireMany(ctx context.Context, k cmds, keys []string, limit int, timeout, ttl time.Duration) ([]Grant, error)
	enqueue(ctx context.Context, k cmds, key string, limit int, ttl time.Duration) (Grant, bool, error)
	wait(ctx context.Context, k cmds, key string, timeout time.Duration) (Grant, error)
	renew(ctx context.Context, k cmds, key, token string, ttl time.Duration) (time.Duration, error)
	release(ctx context.Context, k cmds, key, token string) error
	stats(ctx context.Context, consistent bool) (*Stats, error)
	Close() error
}

// commands is the public command set of Conn and Cluster, written once:
// each method picks the lock or semaphore form of a command and runs it on
// the connection's single implementation. Conn and Cluster embed it.
type commands struct{ c commander }

// Acquire asks for the lock on key, waiting up to timeout for it (0: try
// once). ttl is the lease length; 0 means the server's default. Durations
// are rounded up to whole seconds. When the wait ends without a grant it
// returns ErrTimeout, and the connection stays usable. On a Cluster, see
// Cluster for what is retried.
func (m commands) Acquire(ctx context.Context, key string, timeout, ttl time.Duration) (Grant, error) {
	return m.c.acquire(ctx, lockCmds, key, 1, timeout, ttl)
}

// SemAcquire is Acquire for a semaphore of up to limit holders. The first
// acquirer of a key sets its limit; another limit gets ErrLimitMismatch.
func (m commands) SemAcquire(ctx context.Context, key string, limit int, timeout, ttl time.Duration) (Grant, error) {
	return m.c.acquire(ctx, semCmds, key, limit, timeout, ttl)
}

// Release releases the lease token holds on key. ErrNotHolder means it
// held nothing (never issued, released, or expired).
func (m commands) Release(ctx context.Context, key, token string) error {
	return m.c.release(ctx, lockCmds, key, token)
}

// SemRelease is Release for a semaphore slot.
func (m commands) SemRelease(ctx context.Context, key, token string) error {
	return m.c.release(ctx, semCmds, key, token)
}

// Renew resets the lease token holds on key to ttl from now (0: the
// server's default) and returns the time it has left. ErrNotHolder means
// the lease is gone; nothing is resurrected.
func (m commands) Renew(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	return m.c.renew(ctx, lockCmds, key, token, ttl)
}

// SemRenew is Renew for a semaphore slot.
func (m commands) SemRenew(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	return m.c.renew(ctx, semCmds, key, token, ttl)
}

// Enqueue is the first phase of a two-phase acquire: it takes the lock if
// it is free and nobody waits (acquired is true and g holds the grant), or
// joins the FIFO queue without blocking (acquired is false); Wait then
// blocks for the grant. ErrAlreadyQueued means this connection already
// holds or waits on key.
func (m commands) Enqueue(ctx context.Context, key string, ttl time.Duration) (g Grant, acquired bool, err error) {
	return m.c.enqueue(ctx, lockCmds, key, 1, ttl)
}

// SemEnqueue is Enqueue for a semaphore of up to limit holders.
func (m commands) SemEnqueue(ctx context.Context, key string, limit int, ttl time.Duration) (g Grant, acquired bool, err error) {
	return m.c.enqueue(ctx, semCmds, key, limit, ttl)
}

// Wait blocks up to timeout for the grant of a key enqueued on this
// connection; the lease starts when Wait returns. ErrTimeout means the wait
// ended and the queue entry is gone; ErrNotQueued that there was none (on
// a Cluster, also after a failover since the Enqueue: the entry belonged to
// the old connection).
func (m commands) Wait(ctx context.Context, key string, timeout time.Duration) (Grant, error) {
	return m.c.wait(ctx, lockCmds, key, timeout)
}

// SemWait is Wait for a semaphore.
func (m commands) SemWait(ctx context.Context, key string, timeout time.Duration) (Grant, error) {
	return m.c.wait(ctx, semCmds, key, timeout)
}

// Stats returns the server's state (the stats command). Stats is not a
// mutating command: a cluster's follower answers it with its own, possibly
// stale, view.
func (m commands) Stats(ctx context.Context) (*Stats, error) {
	return m.c.stats(ctx, false)
}

// ConsistentStats is Stats from a state confirmed current: a cluster's
// node, follower or leader, first makes sure it has applied every change
// acknowledged before the call (a linearizable read), and answers an
// error when it cannot (no leader known, or cut off from the quorum). A
// single latchd node answers it as Stats; a server without the option
// (dflockd) ignores it and answers Stats.
func (m commands) ConsistentStats(ctx context.Context) (*Stats, error) {
	return m.c.stats(ctx, true)
}
