package httpfast

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/latchd/latchd/backend"
)

// The read routes answer from this node's engine, which on a follower may
// lag the leader. With ?consistent=true they first pass the backend's read
// barrier (backend.Backend.Barrier), so the answer includes every change
// acknowledged before the request came; a node that cannot confirm its
// state in time answers 503 instead of a possibly stale one.

// readBarrierWait bounds a consistent read's barrier: longer than an
// election and a heartbeat round trip, short enough for a client to retry
// elsewhere.
const readBarrierWait = 2 * time.Second

// reads reports whether o is a read route that takes ?consistent.
func (o op) reads() bool {
	switch o {
	case opStats, opLockGet, opSemGet, opRWGet, opUIKeys:
		return true
	}
	return false
}

// consistentRead passes the backend's read barrier when the request asks
// for one (?consistent=true or 1; false, 0 or absent: none) and reports
// whether the handler may read; when false, it has answered: 400 for
// another value, 503 not_leader or unavailable when the barrier failed.
func (s *Server) consistentRead(ctx *fasthttp.RequestCtx) bool {
	v := ctx.QueryArgs().Peek("consistent")
	switch string(v) {
	case "", "false", "0":
		return true
	case "true", "1":
	default:
		writeError(ctx, errBadRequest, "bad consistent: want true or false")
		return false
	}
	bctx, cancel := context.WithTimeout(context.Background(), readBarrierWait)
	defer cancel()
	err := s.be.Barrier(bctx)
	if err == nil {
		return true
	}
	var nl *backend.NotLeaderError
	if errors.As(err, &nl) {
		writeNotLeader(ctx, nl.Leader.HTTPAddr)
		return false
	}
	writeError(ctx, errUnavailable, "this node could not confirm with the leader in time that its state is current; retry, or read from another node")
	return false
}
