//go:build hashicorpraft

package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// ErrUnknownServer means a membership operation named a server that is not
// a voter of the current configuration.
var ErrUnknownServer = errors.New("replica: no such voter")

// Membership changes and leadership transfer run on the leader only; any
// other node returns a *NotLeaderError naming the leader, as Propose does.
// ctx bounds the wait: when it ends first, the call returns ctx.Err() and
// the change may still take effect. Membership changes are idempotent
// (adding a member again updates its address, removing a non-member
// changes nothing), so retrying one on the current leader is safe after a
// *NotLeaderError or a ctx error.

// AddVoter adds the node id, reached at raftAddr, as a voter; an existing
// member's address is updated. It returns once the new configuration is
// committed (the new node may still be catching up).
//
// The node's client address is not needed here: a node announces its own
// in the log when it becomes leader (see Leader), and only a leader's
// client address is ever named to clients.
func (n *Node) AddVoter(ctx context.Context, id, raftAddr string) error {
	if id == "" || raftAddr == "" {
		return fmt.Errorf("replica: add voter: empty ID or address")
	}
	timeout, err := n.enqueueTimeout(ctx)
	if err != nil {
		return err
	}
	return n.adminErr("add voter", awaitFuture(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, timeout)))
}

// AddLearner adds the node id, reached at raftAddr, as a non-voting
// member: it receives the log but does not count toward the quorum, so
// adding it cannot cost the cluster its majority while it catches up.
// AddVoter promotes it later. It returns once the configuration change is
// committed.
func (n *Node) AddLearner(ctx context.Context, id, raftAddr string) error {
	if id == "" || raftAddr == "" {
		return fmt.Errorf("replica: add learner: empty ID or address")
	}
	timeout, err := n.enqueueTimeout(ctx)
	if err != nil {
		return err
	}
	return n.adminErr("add learner", awaitFuture(ctx, n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, timeout)))
}

// RemoveServer removes the node id from the cluster; removing a node that
// is not a member is not an error. It returns once the new configuration
// is committed. The leader may remove itself: it then steps down once the
// change commits, and the others elect a leader among themselves.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("replica: remove server: empty ID")
	}
	timeout, err := n.enqueueTimeout(ctx)
	if err != nil {
		return err
	}
	return n.adminErr("remove server", awaitFuture(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, timeout)))
}

// TransferLeadership hands leadership to the voter id, or with an empty id
// to the most up-to-date other voter. It returns once this node has
// stepped down; the new leader then restamps before it takes commands
// (its IsLeader turns true). While the transfer runs this node refuses
// proposals with a *NotLeaderError. Naming this node, or a node that is
// not a voter, returns ErrUnknownServer. Raft gives up on a transfer
// after an election timeout and returns an error; this node then stays
// leader.
func (n *Node) TransferLeadership(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	var f raft.Future
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		if id == n.cfg.NodeID {
			return fmt.Errorf("%w: %s is this node, the leader", ErrUnknownServer, id)
		}
		cf := n.raft.GetConfiguration()
		if err := cf.Error(); err != nil {
			return n.adminErr("transfer leadership", err)
		}
		var addr raft.ServerAddress
		for _, s := range cf.Configuration().Servers {
			if string(s.ID) == id && s.Suffrage == raft.Voter {
				addr = s.Address
			}
		}
		if addr == "" {
			return fmt.Errorf("%w: %s", ErrUnknownServer, id)
		}
		f = n.raft.LeadershipTransferToServer(raft.ServerID(id), addr)
	}
	err := awaitFuture(ctx, f)
	if errors.Is(err, raft.ErrEnqueueTimeout) {
		return n.notLeader() // another transfer is queued
	}
	return n.adminErr("transfer leadership", err)
}

// enqueueTimeout is how long raft may wait to take a request: until ctx's
// deadline, else ApplyTimeout. raft reads 0 as "forever", so an expired
// ctx is answered here.
func (n *Node) enqueueTimeout(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		d := time.Until(dl)
		if d <= 0 {
			return 0, context.DeadlineExceeded
		}
		return d, nil
	}
	return n.cfg.ApplyTimeout, nil
}

// awaitFuture waits for f or ctx, whichever ends first. A raft future
// always completes (committed, leadership lost, or shutdown), so the
// goroutine left behind by an ended ctx does not outlive it for long.
func awaitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// adminErr maps raft's errors for a membership or leadership operation.
func (n *Node) adminErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return n.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrUnknownOutcome // in the log: the change may still commit
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return context.DeadlineExceeded
	}
	return fmt.Errorf("replica: %s: %w", op, err)
}
