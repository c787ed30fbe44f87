package replica

import (
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// raftLoop ticks raft, runs the closures of do and call, and proposes
// what a proposer queued while another goroutine held mu.
func (n *Node) raftLoop() {
	tick := time.NewTicker(max(n.cfg.ElectionTimeout/10, time.Millisecond))
	defer tick.Stop()
	for {
		ticked := false
		var f func()
		select {
		case <-n.stop:
			return
		case <-tick.C:
			ticked = true
		case <-n.propQ.wake:
		case f = <-n.fnc:
		}
		n.mu.Lock()
		if ticked && !n.appFailed.Load() { // see handOver
			n.rn.Tick()
		}
		if f != nil {
			f()
		}
		n.release(false)
	}
}

// release proposes what queued, hands out what raft made ready and
// releases mu; then what it queued is appended (by the append thread) and
// applied (by the caller itself with applyInline: see kickApply), and the
// messages that could wait are sent.
func (n *Node) release(applyInline bool) {
	n.proposeQueued()
	later := n.drainReady()
	n.mu.Unlock()
	n.kickAppend(false)
	n.kickApply(applyInline)
	n.sendAll(later)
}

// step hands messages to raft and hands out what they make ready (the
// append and apply threads' responses).
func (n *Node) step(ms ...*raftpb.Message) { n.stepKick(false, ms...) }

// stepKick is step; inline: see kickApply (a transport reader).
func (n *Node) stepKick(inline bool, ms ...*raftpb.Message) {
	if len(ms) == 0 {
		return
	}
	// A snapshot from the leader: its install writes and syncs the whole
	// of it, which a transport reader must not wait for (kickAppend).
	snapIn := slices.ContainsFunc(ms, func(m *raftpb.Message) bool { return m.GetType() == raftpb.MessageType_MsgSnap })
	n.mu.Lock()
	for _, m := range ms {
		// A snapshot's state goes aside, and comes back only if raft
		// takes the snapshot in (stashState): both under mu, so that
		// another reader's step cannot drop it in between.
		_ = n.rn.Step(n.stashState(m))
	}
	n.proposeQueued()
	later := n.drainReady()
	if snapIn {
		n.dropUnpinned()
	}
	n.mu.Unlock()
	// A follower's reader writes what the leader sent itself (its next
	// messages wait in the socket and join the next write); the leader's
	// own writes stay on the append thread, beside its readers' acks.
	n.kickAppend(inline && !n.isLeaderState() && !snapIn)
	n.kickApply(inline)
	n.sendAll(later)
}

// drainReady hands out every Ready: messages to peers go out at once (the
// leader's own append runs beside them), local messages to the append and
// apply threads. It returns the messages that can wait until the caller
// has released mu and applied what committed (see urgent).
func (n *Node) drainReady() (later []*raftpb.Message) {
	for n.rn.HasReady() {
		rd := n.rn.Ready()
		if rd.SoftState != nil {
			n.softState(rd.SoftState)
			n.readsLost()
		}
		if len(rd.ReadStates) > 0 {
			n.readStates(rd.ReadStates)
		}
		if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
			if old := n.term.Swap(rd.GetTerm()); old != rd.GetTerm() && rd.SoftState == nil && n.isLeaderState() {
				// Lost and won again between two Readys: a new
				// leadership, which needs its own Restamp.
				n.leadershipLost()
				n.leadTerm.Store(rd.GetTerm())
			}
			n.commit.Store(rd.GetCommit())
		}
		// Peers first: a follower's write is on the commit path more
		// often than the leader's own (which starts a few microseconds
		// later, beside theirs), and a goroutine woken here waits for
		// this one to park unless the other processor takes it.
		for _, m := range rd.Messages {
			if to := m.GetTo(); to != raft.LocalAppendThread && to != raft.LocalApplyThread {
				if urgent(m) {
					n.notices.replaced(m)
					n.tr.send(m)
				} else {
					later = append(later, m)
				}
			}
		}
		for _, m := range rd.Messages {
			switch m.GetTo() {
			case raft.LocalAppendThread:
				if sn := m.GetSnapshot(); sn != nil && !raft.IsEmptySnap(sn) && len(sn.GetData()) == 0 {
					n.pinStash(sn)
				}
				n.appQ.add(m) // kickAppend hands it out once mu is released
			case raft.LocalApplyThread:
				n.notices.applying.Add(1) // applyBatch takes it off
				n.applyQ.add(m)           // kickApply hands it out once mu is released
			}
		}
	}
	return later
}

// urgent reports whether m goes out before the Ready's committed entries
// are applied: everything but heartbeats and MsgApps without entries (on
// a leader, mostly the new commit index after a quorum answered, whose
// writes would otherwise sit between the quorum's ack and the answer to
// the proposer). Raft tolerates their reordering with later messages.
func urgent(m *raftpb.Message) bool {
	switch m.GetType() {
	case raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgHeartbeatResp:
		return false
	case raftpb.MessageType_MsgApp:
		return len(m.GetEntries()) > 0
	}
	return true
}

// sendAll sends what could wait (after the apply): a commit notice waits
// for the next append while a batch wait is on (notice.go). Then it
// sends the notices held, once no wait is.
func (n *Node) sendAll(ms []*raftpb.Message) {
	for _, m := range ms {
		if !commitNotice(m) || !n.notices.keep(m) {
			n.tr.send(m)
		}
	}
	for _, m := range n.notices.due() {
		n.tr.send(m)
	}
}

// kickAppend runs after mu is released by whoever drained a Ready: the
// writes it queued are done by the caller itself when inline is true and
// the append thread is idle (no wake-up on the follower's commit path),
// else by the append thread. Not inline while the disk is busy (diskBusy):
// a transport reader stuck in a long sync would not hear the leader's
// heartbeats, and the lead would move for nothing.
func (n *Node) kickAppend(inline bool) {
	if n.appQ.len() == 0 {
		return
	}
	if inline && !n.stopping() && !n.diskBusy() && n.appRun.TryLock() {
		n.appendBatch(n.appQ.take())
		n.appRun.Unlock()
		if n.appQ.len() == 0 {
			return
		}
	}
	n.appQ.signal()
}

// kickApply runs after mu is released by whoever drained a Ready: the
// committed entries it queued are applied by the caller itself when
// inline is true and no one else is applying (no hop to the apply
// thread); else the apply thread is woken. The raft loop never applies
// inline (a configuration change's apply calls into it), nor does the
// append thread (its next write would wait).
func (n *Node) kickApply(inline bool) {
	if n.applyQ.len() == 0 {
		return
	}
	// Not while a snapshot's encoding is under way: an apply may then
	// encode the shards it changes first (engine.StateCapture), and the
	// goroutines that apply inline (a transport reader, a proposer such
	// as an event loop) must not stall for it.
	if inline && !n.stopping() && !n.encoding.Load() && n.applyRun.TryLock() {
		n.applyBatch(n.applyQ.take())
		due := n.snapshotDue()
		n.applyRun.Unlock()
		if !due && n.applyQ.len() == 0 {
			return
		}
	}
	n.applyQ.signal() // snapshots are the apply thread's: they write files
}

func (n *Node) softState(ss *raft.SoftState) {
	term := n.rn.BasicStatus().GetTerm()
	old := n.lead.Swap(ss.Lead)
	was := raft.StateType(n.role.Swap(uint32(ss.RaftState)))
	if was != ss.RaftState {
		n.log.Info("raft role", zap.String("node_id", n.cfg.NodeID), zap.String("role", roleOf(ss.RaftState)),
			zap.Uint64("term", term))
	}
	if ss.Lead != old && ss.Lead != raft.None {
		n.leaderChg.Add(1)
		n.log.Info("raft leader", zap.String("node_id", n.cfg.NodeID), zap.String("leader_id", n.memberName(ss.Lead)),
			zap.Uint64("term", term), zap.Bool("this_node", ss.Lead == n.id))
	}
	if ss.RaftState == raft.StateLeader {
		n.leadTerm.Store(term)
		return
	}
	n.leadTerm.Store(0)
	if was == raft.StateLeader {
		n.leadershipLost()
	}
}

// leadershipLost withdraws readiness and answers every proposal in flight:
// entries proposed here may still commit under the next leader, so their
// outcome is unknown.
func (n *Node) leadershipLost() {
	n.setReady(false)
	n.setHold(false)
	n.failWaiters(ErrUnknownOutcome, false)
}

// failWaiters answers err to every entry's proposers waiting here; with
// shut, to every later one too (Shutdown).
func (n *Node) failWaiters(err error, shut bool) {
	n.waitMu.Lock()
	ws := n.waiters
	n.waiters = make(map[uint64]*waiter)
	n.waitShut = n.waitShut || shut
	n.waitMu.Unlock()
	for _, w := range ws {
		n.finish(w, nil, err)
	}
}
