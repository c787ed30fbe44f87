//go:build hashicorpraft

package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"
)

// Ready reports whether this node can serve, for /readyz: nil when it
// knows a leader (itself, ready for commands, or another node) and has
// applied what it knows committed, but for at most ReadyLag entries; else
// why not.
func (n *Node) Ready() error {
	select {
	case <-n.stop:
		return ErrClosed
	default:
	}
	_, id := n.raft.LeaderWithID()
	switch {
	case id == "":
		return errors.New("no known leader")
	case string(id) == n.cfg.NodeID && !n.IsLeader():
		return errors.New("elected, still taking over")
	}
	if commit, applied := n.raft.CommitIndex(), n.raft.AppliedIndex(); applied+ReadyLag < commit {
		return fmt.Errorf("log not caught up: applied %d of %d committed", applied, commit)
	}
	return nil
}

// HandOff transfers leadership to another voter before this node stops,
// so the cluster does not wait an election timeout for a new leader. It
// does nothing on a follower or on a leader with no other voter. It gives
// up after timeout (the node then stops as leader, as before) and logs
// either way; the caller stops the node next.
func (n *Node) HandOff(timeout time.Duration) {
	if n.raft.State() != raft.Leader || !n.hasOtherVoter() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	if err := n.TransferLeadership(ctx, ""); err != nil {
		n.log.Warn("leadership not handed off before stopping", zap.String("node_id", n.cfg.NodeID), zap.Error(err))
		return
	}
	// Name the new leader once this node hears of it (its first heartbeat).
	_, id := n.raft.LeaderWithID()
	for id == "" && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
		_, id = n.raft.LeaderWithID()
	}
	n.log.Info("leadership handed off before stopping", zap.String("node_id", n.cfg.NodeID),
		zap.String("new_leader", string(id)), zap.Duration("took", time.Since(start)))
}

// hasOtherVoter reports whether the configuration has a voter besides
// this node.
func (n *Node) hasOtherVoter() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.NodeID {
			return true
		}
	}
	return false
}
