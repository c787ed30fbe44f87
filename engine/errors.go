package engine

import (
	"errors"
	"fmt"
)

var (
	// ErrMaxKeys means the key does not exist and the engine already holds
	// Config.MaxKeys keys with none idle to evict.
	ErrMaxKeys = errors.New("engine: max keys reached")
	// ErrOwnerMaxKeys means the owner already holds or waits on
	// Config.MaxKeysPerOwner entries. It wraps ErrMaxKeys, so callers that
	// answer ErrMaxKeys answer it alike (dflockd clients know that word).
	ErrOwnerMaxKeys = fmt.Errorf("%w: the owner holds or waits on its maximum", ErrMaxKeys)
	// ErrMaxWaiters means the key's queue already holds Config.MaxWaiters.
	ErrMaxWaiters = errors.New("engine: max waiters reached")
	// ErrLimitMismatch means the key exists with another slot limit, or
	// as another kind (a lock or semaphore versus a read-write key).
	ErrLimitMismatch = errors.New("engine: semaphore limit mismatch")
	// ErrNotHolder means no live lease on the key carries the token.
	ErrNotHolder = errors.New("engine: token does not hold key")
	// ErrAlreadyQueued means the owner already holds or waits on the key,
	// so a two-phase enqueue is refused.
	ErrAlreadyQueued = errors.New("engine: owner already holds or waits on key")
	// ErrNotQueued means Wait found no two-phase enqueue of the owner on
	// the key.
	ErrNotQueued = errors.New("engine: owner has not enqueued on key")
	// ErrLeaseExpired means Wait found the owner's two-phase enqueue
	// granted, but its lease ran out before the Wait collected it: the
	// slot went on and nothing is resurrected.
	ErrLeaseExpired = errors.New("engine: enqueued grant's lease expired before wait")
	// ErrMaxSessions means OpenSessionMax found its cap of open sessions
	// reached.
	ErrMaxSessions = errors.New("engine: max sessions reached")
	// ErrBadRequest means a request's fields are out of range (an empty
	// key, a limit < 1, a negative duration).
	ErrBadRequest = errors.New("engine: bad request")
	// ErrDraining means the engine is draining for a stop (see Drain): it
	// takes no new holder or waiter.
	ErrDraining = errors.New("engine: draining for shutdown")
)
