package replica

import (
	"github.com/hashicorp/raft"
	"go.uber.org/zap"
)

// Status is one node's view of itself and the cluster, for the stats
// command and the HTTP admin API. Every field is read from this node
// alone, without a round trip to the leader, so a follower's view may lag
// and a partitioned node may still name a deposed leader.
type Status struct {
	NodeID string `json:"node_id"`
	// Role is "leader", "follower", "candidate" or "shutdown".
	Role string `json:"role"`
	// Ready is IsLeader: this node leads and takes commands.
	Ready bool `json:"ready"`
	// Term is the current raft term.
	Term uint64 `json:"term"`
	// CommitIndex is the last log index this node knows committed.
	CommitIndex uint64 `json:"commit_index"`
	// AppliedIndex is the last log index the FSM has applied.
	AppliedIndex uint64 `json:"applied_index"`
	// LastLogIndex is the last index in this node's log or snapshot.
	LastLogIndex uint64 `json:"last_log_index"`
	// LeaderID, LeaderRaftAddr, LeaderClientAddr and LeaderHTTPAddr (its
	// REST API) are what this node knows of the leader (see Leader);
	// empty when none is known. LeaderHTTPAddr is also empty when the
	// leader serves no REST API or announced none.
	LeaderID         string `json:"leader_id"`
	LeaderRaftAddr   string `json:"leader_raft_addr"`
	LeaderClientAddr string `json:"leader_client_addr"`
	LeaderHTTPAddr   string `json:"leader_http_addr"`
	// LeaderChanges counts the leaders this node has observed since it
	// started (itself included): each election won, by anyone, that
	// reached it. A steady cluster's count does not move.
	LeaderChanges uint64 `json:"leader_changes"`
	// Voters is the latest configuration this node knows (it may not be
	// committed yet): every server, voters and non-voters, in the
	// configuration's order.
	Voters []Member `json:"voters"`
}

// Member is one server of the raft configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	// Suffrage is "voter", "nonvoter" or "staging".
	Suffrage string `json:"suffrage"`
}

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
