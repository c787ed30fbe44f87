package server

import (
	"errors"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// statusFor maps an engine error to its wire status. It is the one place
// that does.
func statusFor(err error) codec.Status {
	switch {
	case errors.Is(err, engine.ErrMaxKeys):
		return codec.StatusErrorMaxLocks
	case errors.Is(err, engine.ErrMaxWaiters):
		return codec.StatusErrorMaxWaiters
	case errors.Is(err, engine.ErrLimitMismatch):
		return codec.StatusErrorLimitMismatch
	case errors.Is(err, engine.ErrNotQueued):
		return codec.StatusErrorNotEnqueued
	case errors.Is(err, engine.ErrAlreadyQueued):
		return codec.StatusErrorAlreadyEnqueued
	case errors.Is(err, engine.ErrLeaseExpired):
		return codec.StatusErrorLeaseExpired
	}
	return codec.StatusError
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
