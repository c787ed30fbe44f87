//go:build hashicorpraft

package replica

import (
	"github.com/hashicorp/raft"
	"go.uber.org/zap"
)

// Status returns this node's view; see Status. It does not block on raft.
func (n *Node) Status() Status {
	l := n.Leader()
	st := Status{
		NodeID:           n.cfg.NodeID,
		Role:             roleName(n.raft.State()),
		Ready:            n.IsLeader(),
		Term:             n.raft.CurrentTerm(),
		CommitIndex:      n.raft.CommitIndex(),
		AppliedIndex:     n.fsm.AppliedIndex(),
		LastLogIndex:     n.raft.LastIndex(),
		LeaderID:         l.LeaderID,
		LeaderRaftAddr:   l.RaftAddr,
		LeaderClientAddr: l.ClientAddr,
		LeaderHTTPAddr:   l.HTTPAddr,
		LeaderChanges:    n.leaderChanges.Load(),
		Voters:           []Member{},
	}
	select {
	case <-n.stop:
		// raft's own state can still read follower after Shutdown: a
		// candidate or follower loop that was mid-transition may set it
		// after Shutdown set it to shutdown.
		st.Role, st.Ready = "shutdown", false
	default:
	}
	// GetConfiguration reads raft's latest configuration without going
	// through its main loop: it never blocks, even after Shutdown.
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			st.Voters = append(st.Voters, Member{ID: string(s.ID), RaftAddr: string(s.Address), Suffrage: suffrageName(s.Suffrage)})
		}
	}
	return st
}

func roleName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "shutdown"
}

func suffrageName(s raft.ServerSuffrage) string {
	switch s {
	case raft.Voter:
		return "voter"
	case raft.Nonvoter:
		return "nonvoter"
	}
	return "staging"
}

// watchLeader counts the leaders raft reports (LeaderObservation, sent on
// every change of the known leader, "none" included) until the node stops.
// A leader counts when it differs from the last one seen, so the same node
// re-elected after a spell without a leader counts again. The observer
// does not block raft: if obs is full an observation is dropped (raft
// counts it), which a buffer of 64 and this loop make unlikely.
func (n *Node) watchLeader(obs <-chan raft.Observation) {
	defer close(n.watchDone)
	last := ""
	seen := func(id string) {
		if id != "" && id != last {
			n.leaderChanges.Add(1)
			l := n.Leader()
			n.log.Info("raft leader", zap.String("node_id", n.cfg.NodeID), zap.String("leader_id", id),
				zap.String("leader_raft_addr", l.RaftAddr), zap.Uint64("term", n.raft.CurrentTerm()),
				zap.Bool("this_node", id == n.cfg.NodeID))
		}
		if id == "" && last != "" {
			n.log.Warn("raft leader lost", zap.String("node_id", n.cfg.NodeID), zap.String("was", last),
				zap.Uint64("term", n.raft.CurrentTerm()))
		}
		last = id
	}
	// A leader raft learned before the observer was registered.
	_, id := n.raft.LeaderWithID()
	seen(string(id))
	for {
		select {
		case <-n.stop:
			return
		case o := <-obs:
			switch d := o.Data.(type) {
			case raft.LeaderObservation:
				seen(string(d.LeaderID))
			case raft.RaftState:
				n.log.Info("raft role", zap.String("node_id", n.cfg.NodeID), zap.String("role", roleName(d)),
					zap.Uint64("term", n.raft.CurrentTerm()))
			}
		}
	}
}
