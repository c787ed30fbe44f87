package server

import (
	"context"
	"time"

	"github.com/latchd/latchd/codec"
)

// A stats request whose key line is "consistent" answers from a state
// confirmed current: the backend's read barrier first (on a replicated
// node, raft's ReadIndex), then the snapshot. dflockd's clients send
// another key (latchd's Go client "_"), which stays ignored.

// consistentKey is the stats key line that asks for a read barrier.
const consistentKey = "consistent"

// readBarrierWait bounds a consistent stats' barrier: longer than an
// election and a heartbeat round trip.
const readBarrierWait = 2 * time.Second

// readBarrier passes the backend's read barrier and returns nil, or the
// line to answer instead of the stats: error_not_leader when no leader is
// known, error when the state was not confirmed in time. It runs on the
// stats goroutine, not on an event loop.
func (s *Server) readBarrier() []byte {
	ctx, cancel := context.WithTimeout(context.Background(), readBarrierWait)
	defer cancel()
	err := s.be.Barrier(ctx)
	if err == nil {
		return nil
	}
	if addr, ok := notLeader(err); ok {
		return appendNotLeader(nil, addr)
	}
	return codec.AppendStatus(nil, codec.StatusError)
}
