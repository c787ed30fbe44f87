package server

import (
	"errors"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// engineStatuses are the engine's answers to a request, each with its
// wire status: the one place that maps them.
var engineStatuses = [...]struct {
	err error
	st  codec.Status
}{
	{engine.ErrMaxKeys, codec.StatusErrorMaxLocks},
	{engine.ErrMaxWaiters, codec.StatusErrorMaxWaiters},
	{engine.ErrLimitMismatch, codec.StatusErrorLimitMismatch},
	{engine.ErrNotQueued, codec.StatusErrorNotEnqueued},
	{engine.ErrAlreadyQueued, codec.StatusErrorAlreadyEnqueued},
	{engine.ErrLeaseExpired, codec.StatusErrorLeaseExpired},
	{engine.ErrNotHolder, codec.StatusError},
	{engine.ErrBadRequest, codec.StatusError},
	{engine.ErrDraining, codec.StatusError},
}

// statusFor returns the wire status of an engine error, and false for an
// error that is not the engine's (the backend's).
func statusFor(err error) (codec.Status, bool) {
	for _, e := range engineStatuses {
		if errors.Is(err, e.err) {
			return e.st, true
		}
	}
	return codec.StatusError, false
}

// appendOutcome encodes a grant or a timeout; grants to blocking requests
// answer "ok", grants to enqueue "acquired".
func appendOutcome(dst []byte, st codec.Status, o engine.Outcome) []byte {
	switch o.Result {
	case engine.Granted:
		var tok [32]byte
		return codec.AppendGrant(dst, st, o.Token.AppendHex(tok[:0]), int64(o.TTL/1e9))
	case engine.Queued:
		return codec.AppendStatus(dst, codec.StatusQueued)
	case engine.TimedOut:
		return codec.AppendStatus(dst, codec.StatusTimeout)
	case engine.Drained: // a graceful stop withdrew the wait
		return codec.AppendStatus(dst, codec.StatusError)
	}
	return dst // Canceled: the connection is going away; nobody reads it
}
