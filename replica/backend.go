package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
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

// logOps are the log's ops by the backend's.
var logOps = [...]Op{
	backend.OpAcquire: OpAcquire, backend.OpEnqueue: OpEnqueue, backend.OpWait: OpWait, backend.OpRelease: OpRelease,
	backend.OpRenew: OpRenew, backend.OpDisconnect: OpDisconnect, backend.OpCancelWait: OpCancelWait,
	backend.OpOpenSession: OpOpenSession, backend.OpCloseSession: OpCloseSession, backend.OpBeginSession: OpBeginSession,
	backend.OpAcquireSet: OpAcquireSet, backend.OpCancelSet: OpCancelSet,
}

// command returns r as a log entry's Command. The key is copied: the
// entry outlives the caller's buffer.
func command(r *backend.Request) (Command, bool) {
	if int(r.Op) >= len(logOps) || logOps[r.Op] == 0 {
		return Command{}, false
	}
	c := Command{Op: logOps[r.Op], Owner: r.Owner, Key: bytes.Clone(r.Key), Limit: r.Limit, TTL: r.TTL,
		Timeout: r.Timeout, Token: r.Token, Release: r.Release, Client: r.Client, LockDelay: r.LockDelay}
	if len(r.ReqID) > 0 {
		c.ReqKey = backend.ScopeReqID(make([]byte, 0, 9+len(r.ReqID)), r.Scope, r.ReqID)
	}
	if r.Mode != engine.ModeSlot {
		rwCommand(&c, r.Mode)
	}
	switch r.Op {
	case backend.OpRelease:
		c.Owner = 0
	case backend.OpOpenSession:
		c.Salt = r.SessionKey // the session key travels in Salt (see OpOpenSession)
	case backend.OpAcquireSet:
		c.Key = joinKeys(r.Keys)
	}
	return c, true
}

// request is command(r), or the error that refuses r. An OpenSession's
// cap is checked against the sessions applied here, so sessions proposed
// concurrently can overshoot it by that many.
func (n *Node) request(r *backend.Request) (Command, error) {
	if r.Op == backend.OpOpenSession && r.MaxSessions > 0 && n.Engine().Sessions() >= r.MaxSessions {
		return Command{}, engine.ErrMaxSessions
	}
	c, ok := command(r)
	if !ok {
		return c, engine.ErrBadRequest
	}
	return c, nil
}

// reply is r as the backend's: a Renew's lease length goes in Outcome.TTL.
func reply(r Reply) backend.Reply {
	rep := backend.Reply{Outcome: r.Outcome, OK: r.OK, Set: r.Set}
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
	c, err := n.request(r)
	if err != nil {
		return backend.Reply{}, false, err
	}
	if r.Op == backend.OpDisconnect {
		dr := *r
		go func() {
			rep, err := n.Do(dr, nil)
			l.Answer(rep, err)
		}()
		return backend.Reply{}, true, nil
	}
	if r.Op == backend.OpAcquireSet && r.SetSink != nil {
		sink = setRoute{r.SetSink}
	}
	err = n.ProposeFunc(c, sink, func(rep Reply, err error) { l.Answer(reply(rep), backendErr(err)) })
	if err != nil {
		return backend.Reply{}, false, backendErr(err)
	}
	return backend.Reply{}, true, nil
}

// Do proposes r and waits for it to be applied, at most proposeWait.
func (n *Node) Do(r backend.Request, sink engine.Sink) (backend.Reply, error) {
	c, err := n.request(&r)
	if err != nil {
		return backend.Reply{}, err
	}
	if r.Op == backend.OpAcquireSet && r.SetSink != nil {
		sink = setRoute{r.SetSink}
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
	return slices.ContainsFunc(n.Status().Voters, func(m Member) bool { return m.ID == id })
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
func (n *Node) SetAnswerBatches(run func(n int, fn func()) bool) bool { return n.SetAnswerRunner(run) }
