package httpfast

import (
	"context"
	"errors"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
)

// Over a replicated backend every mutation is a raft proposal; reads use
// this node's replica. A follower answers the routes that propose with
// 503 not_leader naming the leader's REST address; a request logged and
// then orphaned by a leadership change answers 503 unknown_outcome.
// Sessions are replicated, so the next leader takes a session_id it never
// issued (registry.adopt).

// msgUnknownOutcome is unknown_outcome's message.
const msgUnknownOutcome = "leadership changed before the request committed: it may or may not have taken effect"

// fail answers a backend's error: the engine's, else the backend's own.
func (s *Server) fail(ctx *fasthttp.RequestCtx, err error) {
	e, msg := apiErrFor(err)
	if e == errInternal && failBackend(ctx, err) {
		return
	}
	if e == errInternal {
		s.log.Error("engine call failed", zap.Error(err))
	}
	writeError(ctx, e, msg)
}

// failBackend answers the backend's own errors (a replicated one's) and
// reports whether err was one. Kept apart from fail so the engine's
// errors never take the address of an error target (errors.As would
// move it to the heap).
func failBackend(ctx *fasthttp.RequestCtx, err error) bool {
	var nl *backend.NotLeaderError
	switch {
	case errors.As(err, &nl):
		writeNotLeader(ctx, nl.Leader.HTTPAddr)
	case errors.Is(err, backend.ErrUnknownOutcome):
		writeError(ctx, errUnknownOutcome, msgUnknownOutcome)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		writeError(ctx, errUnavailable, "the cluster did not take the request in time; it did not take effect")
	default:
		return false
	}
	return true
}

// writeNotLeader answers 503 not_leader with "leader": addr, the leader's
// REST address, or "" when this node knows none.
func writeNotLeader(ctx *fasthttp.RequestCtx, addr string) {
	var buf [2 * respBufLen]byte
	b := append(buf[:0], `{"error":"not_leader","message":"this node is not the leader; send the request to the leader","leader":`...)
	b = appendJSONString(b, addr)
	b = append(b, '}')
	writeJSON(ctx, apiErrs[errNotLeader].status, b)
}
