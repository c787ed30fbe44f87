package httpfast

import (
	"context"
	"errors"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/replica"
)

// Cluster mode. With WithCluster every engine mutation a handler makes is
// a proposal to the replica.Node (clusterBackend), so it is ordered in the
// raft log with the TCP clients' requests of every node; reads (stats,
// session TTLs, metrics) use the node's FSM engine. The node's leader
// runs expiry through the log: this package never runs an expiry clock of
// its own in either mode (a single node's clock is driven by whoever
// built its engine), so nothing is to be turned off here.
//
// A follower answers every route that would propose (sessions, locks,
// semaphores) with 503 not_leader naming the leader's REST address, and
// so does a leader that loses leadership while it handles one. A
// proposal whose fate is unknown (logged, then leadership lost) answers
// 503 unknown_outcome: the request may or may not have taken effect.
//
// Sessions survive a failover: a session's state (holdings, waits, idle
// TTL) and its key are replicated, and a session_id carries owner and
// key, so the next leader takes an id it never issued (registry.adopt).

// WithCluster serves the engine replicated by n: every mutation is a raft
// proposal and only the leader takes them. The engine passed to New is
// unused (pass nil). Session owner IDs then carry a random per-process
// prefix, so they are unique across the cluster. /v1/stats adds the
// node's Status under "cluster".
func WithCluster(n *replica.Node) Option {
	return func(o *options) { o.node = n }
}

// msgUnknownOutcome is unknown_outcome's message.
const msgUnknownOutcome = "leadership changed before the request committed: it may or may not have taken effect"

// fail answers a backend's error: the engine's as ever, and in cluster
// mode the replica's.
func (s *Server) fail(ctx *fasthttp.RequestCtx, err error) {
	if s.node != nil && failCluster(ctx, err) {
		return
	}
	e, msg := apiErrFor(err)
	if e == errInternal {
		s.log.Error("engine call failed", zap.Error(err))
	}
	writeError(ctx, e, msg)
}

// failCluster answers the replica's errors and reports whether err was
// one. Kept apart from fail so the single-node path never takes the
// address of an error target (errors.As would move it to the heap).
func failCluster(ctx *fasthttp.RequestCtx, err error) bool {
	var nl *replica.NotLeaderError
	switch {
	case errors.As(err, &nl):
		writeNotLeader(ctx, nl.HTTPAddr)
	case errors.Is(err, replica.ErrUnknownOutcome), errors.Is(err, replica.ErrClosed):
		writeError(ctx, errUnknownOutcome, msgUnknownOutcome)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		writeError(ctx, errUnavailable, "the cluster did not take the request in time; it did not take effect")
	default:
		return false
	}
	return true
}

// writeNotLeader answers 503 {"error":"not_leader","message":...,
// "leader":addr}: addr is the leader's REST address, "" when this node
// knows none (an election is running, or the leader serves no REST API
// or has not announced it yet).
func writeNotLeader(ctx *fasthttp.RequestCtx, addr string) {
	var buf [2 * respBufLen]byte
	b := append(buf[:0], `{"error":"not_leader","message":"this node is not the leader; send the request to the leader","leader":`...)
	b = appendJSONString(b, addr)
	b = append(b, '}')
	writeJSON(ctx, apiErrs[errNotLeader].status, b)
}

// notLeader answers not_leader with what n knows of the leader.
func notLeader(ctx *fasthttp.RequestCtx, n *replica.Node) {
	writeNotLeader(ctx, n.Leader().HTTPAddr)
}

// clusterStats is /v1/stats in cluster mode: the engine's fields and the
// node's raft state under "cluster".
type clusterStats struct {
	engine.Stats
	Cluster *replica.Status `json:"cluster"`
}
