package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.etcd.io/raft/v3"
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
	// ProposedEntries and ProposedCommands count the entries of clients'
	// commands this node proposed while it led and the commands they
	// carried (their ratio is the batch size); BatchWaits counts the
	// leader's batch waits and BatchWaitTimeouts those that ended at their
	// deadline. Since start.
	ProposedEntries   uint64 `json:"proposed_entries"`
	ProposedCommands  uint64 `json:"proposed_commands"`
	BatchWaits        uint64 `json:"batch_waits"`
	BatchWaitTimeouts uint64 `json:"batch_wait_timeouts"`
	// SnapshotWriteFailures counts this node's failed snapshot writes
	// (each retried after a pause). Since start.
	SnapshotWriteFailures uint64 `json:"snapshot_write_failures"`
	// Voters is the latest configuration this node knows (it may not be
	// committed yet): every server, voters and non-voters, sorted by ID.
	Voters []Member `json:"voters"`
}

// Member is one server of the raft configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	// Suffrage is "voter" or "nonvoter" (a learner).
	Suffrage string `json:"suffrage"`
}

// ReadyLag is how many committed entries a ready node may still have to
// apply: a follower under steady traffic is an entry or two behind, one
// replaying a long log is well past it.
const ReadyLag = 64

// Status returns this node's view; see Status.
func (n *Node) Status() Status {
	l := n.Leader()
	li, _ := n.mem.LastIndex()
	st := Status{
		NodeID:           n.cfg.NodeID,
		Role:             roleOf(raft.StateType(n.role.Load())),
		Ready:            n.IsLeader(),
		Term:             n.term.Load(),
		CommitIndex:      n.commit.Load(),
		AppliedIndex:     n.fsm.AppliedIndex(),
		LastLogIndex:     li,
		LeaderID:         l.LeaderID,
		LeaderRaftAddr:   l.RaftAddr,
		LeaderClientAddr: l.ClientAddr,
		LeaderHTTPAddr:   l.HTTPAddr,
		LeaderChanges:    n.leaderChg.Load(),
		Voters:           []Member{},

		ProposedEntries:   n.propEntries.Load(),
		ProposedCommands:  n.propCmds.Load(),
		BatchWaits:        n.holds.Load(),
		BatchWaitTimeouts: n.holdTimeouts.Load(),

		SnapshotWriteFailures: n.snapFails.Load(),
	}
	if n.stopping() {
		st.Role, st.Ready = "shutdown", false
	}
	n.bookMu.Lock()
	st.Voters = slices.AppendSeq(st.Voters, maps.Values(n.book))
	n.bookMu.Unlock()
	slices.SortFunc(st.Voters, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return st
}

func roleOf(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateFollower:
		return "follower"
	}
	return "candidate"
}

// Ready reports whether this node can serve, for /readyz.
func (n *Node) Ready() error {
	if n.stopping() {
		return ErrClosed
	}
	if n.appFailed.Load() {
		// appendFailed: this node's log is no longer written, and the
		// cluster goes on without it; an operator must see it.
		return errors.New("a write of the raft log failed: this node no longer acknowledges entries (see the log; restart it once its disk is fixed)")
	}
	if u := n.fsm.engineUnlike(); u != "" {
		return fmt.Errorf("engine settings differ from leader %s's (--shards, --max-locks, --max-waiters, "+
			"--max-keys-per-owner, --default-lease-ttl, --gc-max-idle must be the same on every node)", u)
	}
	lead := n.lead.Load()
	switch {
	case lead == raft.None:
		return errors.New("no known leader")
	case lead == n.id && !n.IsLeader():
		return errors.New("elected, still taking over")
	}
	if commit, applied := n.commit.Load(), n.fsm.AppliedIndex(); applied+ReadyLag < commit {
		return fmt.Errorf("log not caught up: applied %d of %d committed", applied, commit)
	}
	return nil
}
