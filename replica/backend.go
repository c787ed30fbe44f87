package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
)

// *Node is a backend.Backend (and a backend.Admin and a
// backend.AnswerBatcher): the front ends hold it as one and never see the
// replica's own types. Every mutation is a proposal; the errors it
// returns are translated to the backend's (backendErr). Built only on
// Node's exported methods.
var (
	_ backend.Backend       = (*Node)(nil)
	_ backend.Admin         = (*Node)(nil)
	_ backend.AnswerBatcher = (*Node)(nil)
)

// proposeWait bounds how long Do waits for a proposal to be applied (a
// new leader finishing its takeover counts in it), and a Submitted
// Disconnect to be logged.
const proposeWait = 2 * time.Second

// command returns r as a log entry's Command. The key is copied: the
// entry outlives the caller's buffer.
func command(r *backend.Request) (Command, bool) {
	c := Command{Owner: r.Owner, Key: bytes.Clone(r.Key), Limit: r.Limit, TTL: r.TTL,
		Timeout: r.Timeout, Token: r.Token, Release: r.Release, Client: r.Client}
	switch r.Op {
	case backend.OpAcquire:
		c.Op = OpAcquire
	case backend.OpEnqueue:
		c.Op = OpEnqueue
	case backend.OpWait:
		c.Op = OpWait
	case backend.OpRelease:
		c.Op, c.Owner = OpRelease, 0
	case backend.OpRenew:
		c.Op = OpRenew
	case backend.OpDisconnect:
		c.Op = OpDisconnect
	case backend.OpCancelWait:
		c.Op = OpCancelWait
	case backend.OpOpenSession:
		// The session key travels in Salt (see OpOpenSession).
		c.Op, c.Salt = OpOpenSession, r.SessionKey
	case backend.OpCloseSession:
		c.Op = OpCloseSession
	case backend.OpBeginSession:
		c.Op = OpBeginSession
	default:
		return c, false
	}
	return c, true
}

// reply is r as the backend's: a Renew's lease length goes in Outcome.TTL.
func reply(r Reply) backend.Reply {
	rep := backend.Reply{Outcome: r.Outcome, OK: r.OK}
	if r.TTL != 0 {
		rep.Outcome.TTL = r.TTL
	}
	return rep
}

// Submit proposes r without blocking: a follower, or a leader still
// taking over, answers *backend.NotLeaderError at once; otherwise l hears
// the reply once the entry is applied (see ProposeFunc). A Disconnect
// waits for its entry on a goroutine of its own, at most proposeWait. via
// is not used: grants are delivered by the apply thread.
func (n *Node) Submit(r *backend.Request, sink engine.Sink, _ engine.Via, l backend.Later) (backend.Reply, bool, error) {
	if !n.IsLeader() {
		return backend.Reply{}, false, &backend.NotLeaderError{Leader: n.LeaderAddrs()}
	}
	if r.Op == backend.OpOpenSession && r.MaxSessions > 0 && n.FSM().Engine().Sessions() >= r.MaxSessions {
		return backend.Reply{}, false, engine.ErrMaxSessions // see Do
	}
	c, ok := command(r)
	if !ok {
		return backend.Reply{}, false, engine.ErrBadRequest
	}
	if r.Op == backend.OpDisconnect {
		dr := *r
		go func() {
			rep, err := n.Do(dr, nil)
			l.Answer(rep, err)
		}()
		return backend.Reply{}, true, nil
	}
	err := n.ProposeFunc(c, sink, func(rep Reply, err error) { l.Answer(reply(rep), backendErr(err)) })
	if err != nil {
		return backend.Reply{}, false, backendErr(err)
	}
	return backend.Reply{}, true, nil
}

// Do proposes r and waits for it to be applied, at most proposeWait.
//
// An OpenSession with a cap checks it against this node's replica before
// it proposes: the count is the sessions the leader has applied, so
// sessions proposed concurrently (here, or by a previous leader whose
// entries are not applied yet) are not counted and the cap can be
// overshot by that many. The replicated OpenSession itself has no cap.
func (n *Node) Do(r backend.Request, sink engine.Sink) (backend.Reply, error) {
	if r.Op == backend.OpOpenSession && r.MaxSessions > 0 && n.FSM().Engine().Sessions() >= r.MaxSessions {
		return backend.Reply{}, engine.ErrMaxSessions
	}
	c, ok := command(&r)
	if !ok {
		return backend.Reply{}, engine.ErrBadRequest
	}
	ctx, cancel := context.WithTimeout(context.Background(), proposeWait)
	defer cancel()
	rep, err := n.Propose(ctx, c, sink)
	return reply(rep), backendErr(err)
}

// backendErr translates the replica's errors to the backend's; the
// engine's and context errors pass unchanged.
func backendErr(err error) error {
	if err == nil {
		return nil
	}
	var nl *NotLeaderError
	switch {
	case errors.As(err, &nl):
		return &backend.NotLeaderError{Leader: backend.Leader{ClientAddr: nl.ClientAddr, HTTPAddr: nl.HTTPAddr}}
	case errors.Is(err, ErrUnknownOutcome), errors.Is(err, ErrClosed):
		return fmt.Errorf("%w: %w", backend.ErrUnknownOutcome, err)
	case errors.Is(err, ErrUnknownServer):
		return fmt.Errorf("%w: %w", backend.ErrUnknownMember, err)
	}
	return err
}

// Engine returns the local replica's engine (a snapshot restore replaces
// it).
func (n *Node) Engine() *engine.Engine { return n.FSM().Engine() }

// LeaderAddrs returns the leader's client and REST addresses, as known
// here.
func (n *Node) LeaderAddrs() backend.Leader {
	l := n.Leader()
	return backend.Leader{ClientAddr: l.ClientAddr, HTTPAddr: l.HTTPAddr}
}

// Replicated reports true.
func (n *Node) Replicated() bool { return true }

// ClusterStatus returns Status.
func (n *Node) ClusterStatus() any {
	st := n.Status()
	return &st
}

// Voters returns the latest configuration's members ([]Member).
func (n *Node) Voters() any { return n.Status().Voters }

// HasMember reports whether id is in the latest configuration.
func (n *Node) HasMember(id string) bool {
	for _, m := range n.Status().Voters {
		if m.ID == id {
			return true
		}
	}
	return false
}

// AddMember is AddVoter or, with learner, AddLearner.
func (n *Node) AddMember(ctx context.Context, id, raftAddr string, learner bool) error {
	if learner {
		return backendErr(n.AddLearner(ctx, id, raftAddr))
	}
	return backendErr(n.AddVoter(ctx, id, raftAddr))
}

// RemoveMember is RemoveServer.
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	return backendErr(n.RemoveServer(ctx, id))
}

// TransferLeader is TransferLeadership.
func (n *Node) TransferLeader(ctx context.Context, id string) error {
	return backendErr(n.TransferLeadership(ctx, id))
}

// SetAnswerBatches is SetAnswerRunner.
func (n *Node) SetAnswerBatches(run func(n int, fn func()) bool) bool {
	if run == nil {
		return n.SetAnswerRunner(nil)
	}
	return n.SetAnswerRunner(run)
}
