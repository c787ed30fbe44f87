package client

import (
	"context"
	"crypto/tls"
	"time"
)

// Lock is a distributed mutex on one key, with a lease renewed in the
// background. Set the fields, then call Acquire (or Enqueue and Wait) and
// Release. Fields must not change while the Lock holds or waits.
//
// Each grant uses its own connection: to ServerFor(Servers, Key), or with
// Cluster set, a Cluster (DialCluster) that follows the cluster's leader,
// so that renewals after a failover reach the new leader with the same
// token. While held, a goroutine renews the lease every half TTL; if a
// renewal fails (over a Cluster: once its retry budget is spent), or
// cannot finish before the lease would run out, the lease is lost: Lost is
// closed, Err says why, and the holder must stop touching the resource
// (fencing with Fence is what makes a late write harmless). A lost lease
// is never re-acquired behind the holder's back.
//
// The lease's end is measured on the local clock from when the request
// that got the grant (or the last renewal) was sent, never from when the
// answer arrived, so the Lock never believes it holds longer than the
// server does. A grant that arrives with less than half its TTL left on
// that measure (it waited in the queue) is renewed before Acquire or Wait
// returns.
//
// Acquire, Enqueue, Wait and Release are serialised; Token, Fence, Lost and
// Err may be called from any goroutine at any time. A Lock must not be
// copied after first use.
type Lock struct {
	// Key names the lock: 1 to 256 bytes without whitespace.
	Key string
	// AcquireTimeout is how long Acquire waits in the queue; 0 tries
	// once. Rounded up to whole seconds.
	AcquireTimeout time.Duration
	// LeaseTTL is the lease length in seconds; 0 means the server's
	// default (33 s unless configured).
	LeaseTTL int
	// Servers are the servers keys are sharded over; empty means
	// DefaultAddr.
	Servers []string
	// Cluster, if not empty, are seed addresses of one latchd cluster;
	// each grant then uses a Cluster instead of a Conn, and Servers is
	// ignored. The Options' retry budget (WithMaxAttempts, WithBackoff)
	// applies to every call, bounded as well by the lease's end for
	// renewals.
	Cluster []string
	// AuthToken is the shared secret, if the servers require one.
	AuthToken string
	// TLSConfig, if set, makes the connections use TLS.
	TLSConfig *tls.Config
	// Options are extra Dial options (timeouts, a dialer).
	Options []Option
	// LockDelay, if not 0, is this lock's own lock-delay (see
	// WithLockDelay): NoLockDelay for none.
	LockDelay time.Duration
	// Mux, if set, carries the grants over its connections (and its
	// session) instead of a connection per grant; Servers, Cluster,
	// AuthToken, TLSConfig and Options are then ignored.
	Mux *Mux

	leased
}

// slots is what l asks for: a lock is the semaphore of limit 1, on the
// lock commands.
func (l *Lock) slots() slots {
	return slots{k: lockCmds, key: l.Key, limit: 1, timeout: l.AcquireTimeout, ttlSeconds: l.LeaseTTL,
		servers: l.Servers, cluster: l.Cluster, auth: l.AuthToken, tls: l.TLSConfig, opts: l.Options, mux: l.Mux}
}

// Acquire waits up to AcquireTimeout for the lock. It returns true when it
// got the lock, false (and a nil error) when the wait timed out. Canceling
// ctx abandons the wait at once: the connection is closed and the server
// withdraws it.
func (l *Lock) Acquire(ctx context.Context) (bool, error) {
	return l.l.acquire(WithLockDelay(ctx, l.LockDelay), l.slots())
}

// Enqueue takes the lock if it is free and nobody waits (true), or joins
// the FIFO queue without blocking (false): call Wait next. Work done
// between the two is the point of the two phases.
func (l *Lock) Enqueue(ctx context.Context) (acquired bool, err error) {
	return l.l.enqueue(WithLockDelay(ctx, l.LockDelay), l.slots())
}

// Wait blocks up to timeout for the lock after an Enqueue that returned
// false. It returns false on timeout, and the place in the queue is lost.
func (l *Lock) Wait(ctx context.Context, timeout time.Duration) (bool, error) {
	return l.l.wait(ctx, l.slots(), timeout)
}

// Semaphore is Lock for a key that up to Limit holders share: the same
// fields, methods and renewal, plus Limit. The first acquirer of a key sets
// its limit; a different Limit gets ErrLimitMismatch while the key exists.
type Semaphore struct {
	Key            string
	Limit          int
	AcquireTimeout time.Duration
	LeaseTTL       int
	Servers        []string
	Cluster        []string
	AuthToken      string
	TLSConfig      *tls.Config
	Options        []Option
	LockDelay      time.Duration
	Mux            *Mux

	leased
}

func (s *Semaphore) slots() slots {
	return slots{k: semCmds, key: s.Key, limit: s.Limit, timeout: s.AcquireTimeout, ttlSeconds: s.LeaseTTL,
		servers: s.Servers, cluster: s.Cluster, auth: s.AuthToken, tls: s.TLSConfig, opts: s.Options, mux: s.Mux}
}

// Acquire is Lock.Acquire for one slot.
func (s *Semaphore) Acquire(ctx context.Context) (bool, error) {
	return s.l.acquire(WithLockDelay(ctx, s.LockDelay), s.slots())
}

// Enqueue is Lock.Enqueue for one slot.
func (s *Semaphore) Enqueue(ctx context.Context) (acquired bool, err error) {
	return s.l.enqueue(WithLockDelay(ctx, s.LockDelay), s.slots())
}

// Wait is Lock.Wait for one slot.
func (s *Semaphore) Wait(ctx context.Context, timeout time.Duration) (bool, error) {
	return s.l.wait(ctx, s.slots(), timeout)
}

// leased is what Lock and Semaphore share: the grant held, its release
// and its signals.
type leased struct{ l lease }

// Release releases the lock or semaphore slot, or withdraws from the queue
// after Enqueue, and stops renewal. It returns an error wrapping ErrLost
// if the lease was lost before, and ErrNotHeld if there was nothing to
// release.
func (x *leased) Release(ctx context.Context) error { return x.l.release(ctx) }

// Token returns the current grant's fencing token, or "" when nothing is
// held. It stays set after the lease is lost, until Release or the next
// acquire.
func (x *leased) Token() string { return x.l.token() }

// Fence returns the current grant's fence number, or 0.
func (x *leased) Fence() uint64 { return x.l.fenceNum() }

// Lost returns a channel closed when the current grant is lost (not when
// it is released). Before a grant, and after Release, it returns the
// channel of the next grant, so a watcher may start early.
func (x *leased) Lost() <-chan struct{} { return x.l.lostChan() }

// Err returns why the current grant was lost, or nil.
func (x *leased) Err() error { return x.l.lostErr() }

// Held reports whether a grant is held that is not lost and whose lease
// has not run out on the local clock: while a renewal is late, Held is
// already false though Lost is not yet closed.
func (x *leased) Held() bool { return x.l.holding() }
