package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/latchd/latchd/codec"
)

// Errors a Conn, Lock, Semaphore or Election returns. Test with errors.Is.
var (
	// ErrTimeout reports that a wait ended without a grant. It is a result,
	// not a failure: the connection stays usable. Lock, Semaphore and
	// Election turn it into a false return instead.
	ErrTimeout = errors.New("client: timed out waiting for the key")
	// ErrMaxLocks reports that the server holds as many keys as it may.
	ErrMaxLocks = errors.New("client: server at max locks")
	// ErrMaxWaiters reports that the key's queue is full.
	ErrMaxWaiters = errors.New("client: key at max waiters")
	// ErrLimitMismatch reports a semaphore limit other than the one the
	// key was created with (or a lock request on a semaphore key).
	ErrLimitMismatch = errors.New("client: semaphore limit mismatch")
	// ErrNotHolder reports a release or renewal with a token that does
	// not hold the key: never issued, already released, or expired.
	ErrNotHolder = errors.New("client: token does not hold the key")
	// ErrNotQueued reports a wait on a key this connection did not
	// enqueue for (error_not_enqueued).
	ErrNotQueued = errors.New("client: not enqueued for the key")
	// ErrLeaseExpired reports a wait whose enqueued grant's lease ran out
	// before the wait collected it (error_lease_expired): the slot went
	// to the next waiter. It wraps ErrNotQueued, since nothing is
	// enqueued any more, so code that tests for ErrNotQueued still
	// matches; enqueue again to retry.
	ErrLeaseExpired = fmt.Errorf("client: lease of the enqueued grant expired before the wait: %w", ErrNotQueued)
	// ErrAlreadyQueued reports an enqueue on a key this connection already
	// holds or waits for (error_already_enqueued).
	ErrAlreadyQueued = errors.New("client: connection already holds or waits on the key")
	// ErrAuth reports a rejected (or unexpected) auth secret. The server
	// closes the connection.
	ErrAuth = errors.New("client: authentication failed")
	// ErrProtocol reports an answer the client cannot understand or a
	// request the server rejected as malformed. The connection is closed.
	ErrProtocol = errors.New("client: protocol error")
	// ErrBadRequest reports arguments the client refuses to send: an
	// empty key or one with whitespace, a limit < 1.
	ErrBadRequest = errors.New("client: bad request")
	// ErrClosed reports use of a Conn that was closed, by Close, by a
	// canceled context or by an I/O error.
	ErrClosed = errors.New("client: connection closed")
	// ErrHeld reports an Acquire or Enqueue on a Lock or Semaphore that
	// already holds or waits; Release it first.
	ErrHeld = errors.New("client: already held or enqueued")
	// ErrNotHeld reports a Release or Wait on a Lock or Semaphore that
	// holds (or waits for) nothing.
	ErrNotHeld = errors.New("client: not held")
	// ErrLost reports that the lease was lost before Release: renewal
	// failed or the connection broke. Err tells why.
	ErrLost = errors.New("client: lease lost")
	// ErrUnknownOutcome reports an acquire, enqueue or wait whose
	// connection broke after the request was sent: the server may or may
	// not have run it. A Cluster retries such a request with its id, and
	// returns this only when its context was canceled or the key left no
	// room for the id. A grant
	// the server did make is released when it sees the disconnect, or
	// expires with its lease. The error wraps the cause.
	ErrUnknownOutcome = errors.New("client: outcome unknown: the connection broke after the request was sent")
	// ErrNoLeader reports that a Cluster spent its retry budget (attempts
	// or the context's deadline) without an answer from the leader. The
	// error wraps the last cause: a *NotLeaderError, a dial or I/O error.
	ErrNoLeader = errors.New("client: no cluster leader answered within the retry budget")
)

// NotLeaderError is the answer of a cluster follower to a mutating request:
// retry at Leader (a client address, host:port; empty when unknown).
type NotLeaderError struct {
	Leader string
}

// Error implements error.
func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "client: server is not the leader (leader unknown)"
	}
	return fmt.Sprintf("client: server is not the leader; leader is %s", e.Leader)
}

// errorFor maps a non-success status to an error. onError is what a bare
// "error" means for the command that got it (a latchd before the dflockd
// v1.10 words answered e and w with a bare error).
func errorFor(r reply, onError error) error {
	switch r.Status {
	case codec.StatusTimeout:
		return ErrTimeout
	case codec.StatusErrorMaxLocks:
		return ErrMaxLocks
	case codec.StatusErrorMaxWaiters:
		return ErrMaxWaiters
	case codec.StatusErrorLimitMismatch:
		return ErrLimitMismatch
	case codec.StatusErrorAuth:
		return ErrAuth
	case codec.StatusErrorNotLeader:
		return &NotLeaderError{Leader: strings.TrimSpace(r.Body)}
	case codec.StatusErrorNotEnqueued:
		return ErrNotQueued
	case codec.StatusErrorAlreadyEnqueued:
		return ErrAlreadyQueued
	case codec.StatusErrorLeaseExpired:
		return ErrLeaseExpired
	case codec.StatusError:
		return onError
	}
	return fmt.Errorf("%w: unexpected answer %q %q", ErrProtocol, r.Status.String(), r.Body)
}
