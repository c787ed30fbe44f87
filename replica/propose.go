package replica

import (
	"context"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
)

// newProposal is the part of Propose both raft builds share: it refuses
// a command that is not a client's (a Restamp is the node's own
// business), answers not_leader on a follower, waits (within ctx) for a
// new leader's restamp, stamps the leader's time, salt and request id,
// and registers sink when the command may park. A nil ctx never waits:
// a leader still taking over answers not_leader, and the proposal has no
// done channel (ProposeFunc answers through a callback).
func (n *Node) newProposal(ctx context.Context, c Command, sink engine.Sink) (*proposal, error) {
	if c.Op == OpRestamp || c.Op == 0 || c.Op >= opEnd {
		return nil, ErrBadCommand
	}
	if !n.isReady.Load() {
		if !n.isLeaderState() || ctx == nil {
			return nil, n.notLeader()
		}
		select {
		case <-n.readyCh():
		case <-ctx.Done():
			return nil, n.notLeader()
		case <-n.stop:
			return nil, ErrClosed
		}
	}
	if ctx != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	c.Now = n.now()
	if c.Op == OpAcquire || c.Op == OpEnqueue {
		c.Salt = clock.Salt()
	}
	c.Origin = n.origin
	c.ReqID = n.seq.Add(1)
	p := &proposal{c: c, parks: sink != nil && (c.Op == OpAcquire || c.Op == OpWait)}
	if ctx != nil {
		p.done = make(chan proposalResult, 1) // Propose waits on it; ProposeFunc sets a callback
	}
	if p.parks {
		n.fsm.register(c.ReqID, sink)
	}
	return p, nil
}

// setReady publishes whether this node may take commands (both raft
// builds): a leader once restamped, not after losing leadership.
func (n *Node) setReady(ok bool) {
	n.readyMu.Lock()
	defer n.readyMu.Unlock()
	if ok == n.isReady.Load() {
		return
	}
	n.isReady.Store(ok)
	if ok {
		close(n.ready)
	} else {
		n.ready = make(chan struct{})
	}
}

// readyCh is closed once the node is ready for commands.
func (n *Node) readyCh() chan struct{} {
	n.readyMu.Lock()
	defer n.readyMu.Unlock()
	return n.ready
}
