package replica

import (
	"context"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"go.uber.org/zap"
)

// Learner promotion: the leader promotes a learner that has caught up to
// a voter on its own (Config.LearnerPromoteLag), one at a time, through
// raft's joint consensus: a ConfChangeV2 with an explicit joint transition
// enters the configuration C(old, new), in which a decision needs a
// majority of the old voters and of the new ones, and raft leaves it by
// itself once that entry is applied (ConfChangeTransitionJointImplicit).

// promoteLoop checks, every few heartbeats while this node leads, for a
// learner to promote, and promotes it. It does nothing when
// cfg.LearnerPromoteLag is 0.
func (n *Node) promoteLoop() {
	if n.cfg.LearnerPromoteLag == 0 {
		return
	}
	tick := time.NewTicker(max(n.cfg.ElectionTimeout/2, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
		if !n.IsLeader() {
			continue
		}
		if m, ok := n.caughtUpLearner(); ok {
			n.promote(m)
		}
	}
}

// caughtUpLearner returns a learner to promote: one raft replicates to in
// its steady state, recently active, whose log ends within
// LearnerPromoteLag entries of the commit index. None while the
// configuration is joint.
func (n *Node) caughtUpLearner() (Member, bool) {
	var cands []uint64
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
	defer cancel()
	err := n.call(ctx, func() {
		st := n.rn.Status()
		if len(st.Config.Voters[1]) > 0 || st.RaftState != raft.StateLeader {
			return
		}
		for id, pr := range st.Progress {
			if pr.IsLearner && pr.State == tracker.StateReplicate && pr.RecentActive &&
				pr.Match > 0 && pr.Match+n.cfg.LearnerPromoteLag >= st.GetCommit() {
				cands = append(cands, id)
			}
		}
	})
	if err != nil || len(cands) == 0 {
		return Member{}, false
	}
	slices.Sort(cands)
	n.bookMu.Lock()
	defer n.bookMu.Unlock()
	for _, id := range cands {
		if m, ok := n.book[id]; ok && m.ID != "" && m.RaftAddr != "" && m.Suffrage == "nonvoter" {
			return m, true
		}
	}
	return Member{}, false
}

// promote makes learner m a voter and waits until the joint
// configuration is left; a change refused or cut short by a leader
// change is tried again on a later tick if m is still a caught-up learner.
func (n *Node) promote(m Member) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
	defer cancel()
	start := time.Now()
	err := n.confChangeV2(ctx, raftpb.ConfChangeType_ConfChangeAddNode, m.ID, m.RaftAddr,
		raftpb.ConfChangeTransition_ConfChangeTransitionJointImplicit)
	if err != nil {
		n.log.Warn("learner not promoted", zap.String("learner", m.ID), zap.Error(err))
		return
	}
	// Joint until raft's own leave entry is applied: the next change
	// waits for it (caughtUpLearner).
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for n.joint() {
		select {
		case <-ctx.Done():
			n.log.Warn("learner promoted, the joint configuration not left yet", zap.String("learner", m.ID))
			return
		case <-n.stop:
			return
		case <-tick.C:
		}
	}
	n.log.Info("learner promoted to voter", zap.String("node_id", n.cfg.NodeID), zap.String("learner", m.ID),
		zap.Duration("took", time.Since(start)))
}

// joint reports whether the configuration this node applied is joint.
func (n *Node) joint() bool {
	n.bookMu.Lock()
	defer n.bookMu.Unlock()
	return len(n.confState.GetVotersOutgoing()) > 0
}
