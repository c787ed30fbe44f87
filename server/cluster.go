package server

import (
	"bytes"
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/replica"
)

// Cluster mode. With WithCluster, every mutating request becomes a raft
// proposal instead of an engine call on the event loop: the loop copies
// the request, parks the connection (so later requests keep their order),
// and proposes it with replica.Node.ProposeFunc, which does not block; the
// answer comes back on the replica's goroutine that applied the entry (or,
// with one event loop, in a task on the loop: answers.go) and is written
// like a grant (directly to an idle connection, else through its loop). A follower answers at once with
// "error_not_leader <leader-client-addr>".
// Stats are read from the local replica, on any node.
//
// What a connection did is cleaned up through the log too: when a
// connection that proposed anything closes, the leader proposes its
// Disconnect once its last proposal has returned, so the Disconnect can
// never overtake the Acquire it should undo. A follower cannot propose; a
// connection that closes on a node that lost leadership leaves its grants
// to their leases, and so does every connection when the server stops: a
// leader shutting down hands its clients' grants to the next leader, where
// they renew them by token.

// proposeWait bounds how long a proposal waits for a new leader to finish
// taking over (its Restamp), and a Disconnect to be logged.
const proposeWait = 2 * time.Second

// WithCluster serves the engine replicated by n: commands go through the
// raft log and only the leader grants. The engine passed to New is unused
// (pass nil); the replica's is read for stats.
func WithCluster(n *replica.Node) Option {
	return func(s *Server) { s.node = n }
}

// engine returns the engine stats read: the replica's in cluster mode (a
// snapshot restore replaces it).
func (s *Server) engine() *engine.Engine {
	if s.node != nil {
		return s.node.FSM().Engine()
	}
	return s.eng
}

// ownerBase returns where a cluster node's connection IDs start: a random
// 31-bit prefix per process, so owners are unique across the cluster and
// across restarts (a new leader keeps the grants of an old one's
// connections, and a new connection must not inherit them). Bit 63 stays
// clear: it marks REST sessions.
func ownerBase() uint64 { return (clock.Salt() & 0x7fff_ffff) << 32 }

// clusterStats is the stats answer in cluster mode: the engine's fields
// and the node's raft state under "cluster".
type clusterStats struct {
	engine.Stats
	Cluster *replica.Status `json:"cluster"`
}

// proposal is one request copied off the connection's read buffer.
type proposal struct {
	cmd     codec.Cmd
	key     []byte
	token   fence.Token
	limit   int
	ttl     time.Duration
	timeout time.Duration
}

// propose answers a mutating request in cluster mode: at once on a
// follower, else by parking the connection and proposing the request on a
// goroutine. Event loop only.
func (s *Server) propose(ss *session, req *codec.Request, out []byte) []byte {
	if !s.node.IsLeader() {
		return appendNotLeader(out, s.node.Leader().ClientAddr)
	}
	p := proposal{cmd: req.Cmd, key: bytes.Clone(req.Key), limit: 1,
		ttl: seconds(req.TTL), timeout: seconds(req.Timeout)}
	if req.Cmd.Semaphore() {
		p.limit = int(req.Limit)
	}
	switch req.Cmd {
	case codec.CmdRelease, codec.CmdSemRelease, codec.CmdRenew, codec.CmdSemRenew:
		tok, err := fence.Parse(req.Token)
		if err != nil {
			return codec.AppendStatus(out, codec.StatusError)
		}
		p.token = tok
	}
	c := replica.Command{Key: p.key, Owner: ss.id, Client: ss.id}
	var sink engine.Sink
	switch req.Cmd {
	case codec.CmdLock, codec.CmdSemLock:
		c.Op, c.Limit, c.TTL, c.Timeout, sink = replica.OpAcquire, p.limit, p.ttl, p.timeout, ss
	case codec.CmdEnqueue, codec.CmdSemEnqueue:
		c.Op, c.Limit, c.TTL = replica.OpEnqueue, p.limit, p.ttl
	case codec.CmdWait, codec.CmdSemWait:
		c.Op, c.Timeout, sink = replica.OpWait, p.timeout, ss
	case codec.CmdRelease, codec.CmdSemRelease:
		c.Op, c.Owner, c.Token = replica.OpRelease, 0, p.token
	case codec.CmdRenew, codec.CmdSemRenew:
		c.Op, c.Token, c.TTL = replica.OpRenew, p.token, p.ttl
	default:
		return codec.AppendStatus(out, codec.StatusError)
	}
	parked, proposed := ss.parked, ss.proposed
	ss.parked = true
	ss.proposed = true
	ss.inflight.Add(1)
	s.pending.Add(1)
	// The answer comes on the replica's apply thread or the loop's answer
	// task (or at once, inside ProposeFunc, when raft refuses the entry):
	// no goroutine per request.
	err := s.node.ProposeFunc(c, sink, func(r replica.Reply, err error) { s.answer(ss, &p, r, err) })
	if err != nil {
		// Not taken (a follower, or a leader still taking over): nothing
		// of it is in the log, and the loop answers now.
		ss.parked, ss.proposed = parked, proposed
		ss.inflight.Add(-1)
		s.pending.Done()
		return appendNotLeaderErr(out, err)
	}
	return out
}

// answer hands the outcome of ss's proposal p back to the connection:
// written to the socket by the caller when the connection is parked idle
// (the direct hand-off), else queued for its loop. It runs on the
// replica's goroutine that has the outcome, or in the loop's answer task
// (answers.go), and never blocks.
func (s *Server) answer(ss *session, p *proposal, r replica.Reply, err error) {
	defer s.pending.Done()
	defer s.proposed(ss) // before Done: it may add a Disconnect
	var line []byte
	if err == nil {
		switch p.cmd {
		case codec.CmdLock, codec.CmdSemLock, codec.CmdWait, codec.CmdSemWait:
			if r.Outcome.Result == engine.Queued {
				return // ss hears the grant or the timeout as a Sink
			}
			line = appendOutcome(nil, codec.StatusOK, r.Outcome)
		case codec.CmdEnqueue, codec.CmdSemEnqueue:
			line = appendOutcome(nil, codec.StatusAcquired, r.Outcome)
		case codec.CmdRelease, codec.CmdSemRelease:
			line = codec.AppendStatus(nil, codec.StatusOK)
		case codec.CmdRenew, codec.CmdSemRenew:
			line = codec.AppendRemaining(nil, int64(r.TTL/time.Second))
		}
	}
	if err != nil {
		var nl *replica.NotLeaderError
		switch {
		case errors.As(err, &nl):
			line = appendNotLeader(nil, nl.ClientAddr)
		case errors.Is(err, replica.ErrUnknownOutcome) || !engineError(err):
			// The request entered the log and leadership was lost before
			// it committed, or the node closed or failed under it: it may
			// or may not take effect. Answering either way could be a lie
			// (and l has no bare error to give); closing the connection
			// tells the client the outcome is unknown.
			s.debug("proposal outcome unknown", zap.Uint64("conn_id", uint64(ss.id)), zap.Error(err))
			_ = ss.conn.Close()
			return
		case p.cmd == codec.CmdRelease || p.cmd == codec.CmdSemRelease ||
			p.cmd == codec.CmdRenew || p.cmd == codec.CmdSemRenew:
			line = codec.AppendStatus(nil, codec.StatusError)
		default:
			line = codec.AppendStatus(nil, statusFor(err))
		}
	}
	if ss.directLine(line) {
		return
	}
	ss.mu.Lock()
	ss.inbox = append(ss.inbox, line...)
	ss.delivered = true
	ss.mu.Unlock()
	ss.wake()
}

// appendNotLeaderErr answers a proposal the node refused at once.
func appendNotLeaderErr(out []byte, err error) []byte {
	var nl *replica.NotLeaderError
	if errors.As(err, &nl) {
		return appendNotLeader(out, nl.ClientAddr)
	}
	return codec.AppendStatus(out, codec.StatusError)
}

// engineError reports whether err is the engine's answer to a request
// (which the protocol has a status for), not the replica's or raft's.
func engineError(err error) bool {
	for _, e := range [...]error{engine.ErrMaxKeys, engine.ErrMaxWaiters, engine.ErrLimitMismatch,
		engine.ErrNotHolder, engine.ErrAlreadyQueued, engine.ErrNotQueued, engine.ErrLeaseExpired, engine.ErrBadRequest} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// proposed ends one proposal of ss; the last one of a closed connection
// proposes its Disconnect.
func (s *Server) proposed(ss *session) {
	if ss.inflight.Add(-1) == 0 && ss.closed.Load() {
		s.disconnect(ss)
	}
}

// closeCluster is close's cluster half: withdraw what the connection
// queued and (with AutoRelease) release what it held, through the log.
// Event loop only.
func (s *Server) closeCluster(ss *session) {
	if !ss.proposed {
		return // nothing of it is in the log
	}
	ss.closed.Store(true)
	if ss.inflight.Load() == 0 {
		s.disconnect(ss)
	}
}

// disconnect proposes ss's Disconnect, once, on a goroutine.
func (s *Server) disconnect(ss *session) {
	if !ss.disconnected.CompareAndSwap(false, true) {
		return
	}
	if !s.node.IsLeader() {
		return // a follower cannot; the leases run out
	}
	release := s.cfg.AutoRelease
	select {
	case <-s.stop:
		// Shutting down: the clients move to the next leader and renew
		// their grants there by token; releasing them now would take
		// away locks their holders still rely on. Their waits go: no
		// one can resume a wait of this connection (w needs its owner),
		// and left queued each would be granted in turn and held unheard
		// for a lease.
		release = false
	default:
	}
	s.pending.Add(1)
	go func() {
		defer s.pending.Done()
		ctx, cancel := context.WithTimeout(context.Background(), proposeWait)
		defer cancel()
		if err := s.node.Disconnect(ctx, ss.id, release); err != nil {
			s.debug("disconnect not logged", zap.Uint64("conn_id", uint64(ss.id)), zap.Error(err))
		}
	}()
}

// appendNotLeader appends "error_not_leader <addr>", or the bare status
// while no leader is known.
func appendNotLeader(dst []byte, addr string) []byte {
	if addr == "" {
		return codec.AppendStatus(dst, codec.StatusErrorNotLeader)
	}
	return codec.AppendBody(dst, codec.StatusErrorNotLeader, []byte(addr))
}
