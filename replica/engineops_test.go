package replica

import (
	"context"
	"io"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

// The engine's operations as proposals, for the tests: each builds a
// Command and goes through Propose, as backend.go's Do does for the front
// ends.

// Acquire proposes engine.Acquire; req.Salt is replaced by the leader's.
func (n *Node) Acquire(ctx context.Context, req engine.AcquireReq, sink engine.Sink) (engine.Outcome, error) {
	r, err := n.Propose(ctx, Command{Op: OpAcquire, Owner: req.Owner, Key: req.Key, Limit: req.Limit,
		TTL: req.TTL, Timeout: req.Timeout}, sink)
	return r.Outcome, err
}

// Enqueue proposes engine.Enqueue.
func (n *Node) Enqueue(ctx context.Context, req engine.AcquireReq) (engine.Outcome, error) {
	r, err := n.Propose(ctx, Command{Op: OpEnqueue, Owner: req.Owner, Key: req.Key, Limit: req.Limit,
		TTL: req.TTL}, nil)
	return r.Outcome, err
}

// Wait proposes engine.Wait.
func (n *Node) Wait(ctx context.Context, key []byte, owner engine.OwnerID, timeout time.Duration, sink engine.Sink) (engine.Outcome, error) {
	r, err := n.Propose(ctx, Command{Op: OpWait, Owner: owner, Key: key, Timeout: timeout}, sink)
	return r.Outcome, err
}

// Release proposes engine.Release.
func (n *Node) Release(ctx context.Context, key []byte, tok fence.Token) error {
	_, err := n.Propose(ctx, Command{Op: OpRelease, Key: key, Token: tok}, nil)
	return err
}

// Renew proposes engine.Renew and returns the lease length.
func (n *Node) Renew(ctx context.Context, key []byte, tok fence.Token, ttl time.Duration, owner engine.OwnerID) (time.Duration, error) {
	r, err := n.Propose(ctx, Command{Op: OpRenew, Key: key, Token: tok, TTL: ttl, Owner: owner}, nil)
	return r.TTL, err
}

// Disconnect proposes engine.Disconnect.
func (n *Node) Disconnect(ctx context.Context, owner engine.OwnerID, release bool) error {
	_, err := n.Propose(ctx, Command{Op: OpDisconnect, Owner: owner, Release: release}, nil)
	return err
}

// CancelWait proposes engine.CancelWait: owner's parked request on key
// leaves the queue and its Sink (on the node that proposed it) hears
// Canceled. It reports false when the request was already answered.
func (n *Node) CancelWait(ctx context.Context, key []byte, owner engine.OwnerID) (bool, error) {
	r, err := n.Propose(ctx, Command{Op: OpCancelWait, Owner: owner, Key: key}, nil)
	return r.OK, err
}

// OpenSession proposes engine.OpenSessionKeyed (no cap); key is the
// opener's secret for the session (0 for none), replicated with it.
func (n *Node) OpenSession(ctx context.Context, owner engine.OwnerID, ttl time.Duration, key uint64) error {
	_, err := n.Propose(ctx, Command{Op: OpOpenSession, Owner: owner, TTL: ttl, Salt: key}, nil)
	return err
}

// CloseSession proposes engine.CloseSession.
func (n *Node) CloseSession(ctx context.Context, owner engine.OwnerID) (bool, error) {
	r, err := n.Propose(ctx, Command{Op: OpCloseSession, Owner: owner}, nil)
	return r.OK, err
}

// BeginSession proposes engine.BeginSession.
func (n *Node) BeginSession(ctx context.Context, owner engine.OwnerID) (bool, error) {
	r, err := n.Propose(ctx, Command{Op: OpBeginSession, Owner: owner}, nil)
	return r.OK, err
}

// EndSession proposes engine.EndSession.
func (n *Node) EndSession(ctx context.Context, owner engine.OwnerID) error {
	_, err := n.Propose(ctx, Command{Op: OpEndSession, Owner: owner}, nil)
	return err
}

// WriteState writes the FSM's state; see FSM.WriteState.
func (n *Node) WriteState(w io.Writer) (uint64, error) { return n.fsm.WriteState(w) }
