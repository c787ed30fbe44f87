package replica

import (
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// The append thread persists what raft hands to LocalAppendThread
// (entries, hard state, snapshots from the leader) and then delivers
// raft's responses; a follower's transport reader may do it inline
// (kickAppend).

// appendBatch persists what the MsgStorageAppends ms carry, with one
// fdatasync, then delivers their responses: acks to the leader first,
// then this node's own. Under appRun.
func (n *Node) appendBatch(ms []*raftpb.Message) {
	if n.appFailed.Load() || len(ms) == 0 {
		return
	}
	hs, syncHS, err := n.writeEntries(ms)
	if err == nil && hs != nil && syncHS {
		err = n.saveHardState(hs, true) // a term or vote: on disk before anything acts on it
	}
	if err != nil {
		n.appendFailed(err)
		return
	}
	// Acks to the leader first (a follower's MsgAppResp is on the
	// commit path), then this node's own responses in one step.
	var local []*raftpb.Message
	for _, m := range ms {
		for _, r := range m.GetResponses() {
			if r.GetTo() == n.id {
				local = append(local, r)
			} else {
				n.tr.send(r)
			}
		}
	}
	if hs != nil && !syncHS {
		// A commit index alone is not synced (see writeHardState), so
		// its write need not delay the acks.
		if err := n.saveHardState(hs, false); err != nil {
			n.appendFailed(err)
			return
		}
	}
	n.step(local...)
}

// writeEntries writes the entries and snapshots ms carry, consecutive
// entries with one fdatasync, and returns the newest hard state among
// them (nil if none) and whether it changed the term or vote (then it
// must be synced before anything acts on it).
func (n *Node) writeEntries(ms []*raftpb.Message) (hs *raftpb.HardState, syncHS bool, err error) {
	var ents []*raftpb.Entry
	flush := func() error {
		if len(ents) == 0 {
			return nil
		}
		start := time.Now()
		err := n.st.appendEntries(ents)
		if took := time.Since(start); took > slowSync {
			n.diskSlow(start.Add(took + slowFor))
		}
		if err == nil {
			err = n.mem.Append(ents)
		}
		ents = nil
		return err
	}
	for _, m := range ms {
		if snap := m.GetSnapshot(); snap != nil && !raft.IsEmptySnap(snap) {
			if err := flush(); err != nil {
				return nil, false, err
			}
			if err := n.installSnapshot(snap); err != nil {
				return nil, false, err
			}
		}
		if es := m.GetEntries(); len(es) > 0 {
			if len(ents) > 0 && es[0].GetIndex() != ents[len(ents)-1].GetIndex()+1 {
				if err := flush(); err != nil {
					return nil, false, err
				}
			}
			ents = append(ents, es...)
		}
		if m.Term != nil {
			hs = &raftpb.HardState{Term: new(m.GetTerm()), Vote: new(m.GetVote()), Commit: new(m.GetCommit())}
			if hs.GetTerm() != n.lastHS.GetTerm() || hs.GetVote() != n.lastHS.GetVote() {
				syncHS = true
			}
		}
	}
	return hs, syncHS, flush()
}

// saveHardState writes hs (synced or not: see writeHardState) and hands
// it to MemoryStorage. Under appRun.
func (n *Node) saveHardState(hs *raftpb.HardState, sync bool) error {
	if err := n.st.writeHardState(hs, sync); err != nil {
		return err
	}
	n.lastHS = raftpb.HardState{Term: new(hs.GetTerm()), Vote: new(hs.GetVote()), Commit: new(hs.GetCommit())}
	return n.mem.SetHardState(hs)
}

// appendFailed stops the append thread after a failed write: the log's
// tail is unknown, so this node stops taking part rather than acknowledge
// what may not be on disk. It takes no more commands, and a leader hands
// over (handOver); a restart, once the disk is fixed, brings it back.
func (n *Node) appendFailed(err error) {
	if n.appFailed.Swap(true) {
		return
	}
	n.log.Error("raft log write failed; this node stops acknowledging and leading until restarted", zap.Error(err))
	n.setReady(false)
	n.do(n.handOver)
}

// handOver runs on the raft loop once a write of the log failed. The
// node no longer ticks (raftLoop), so it neither heartbeats nor
// campaigns; a leader also transfers its leadership at once to the
// follower with the longest log.
func (n *Node) handOver() {
	if n.rn.BasicStatus().RaftState != raft.StateLeader {
		return
	}
	var to, best uint64
	for id, pr := range n.rn.Status().Progress {
		if id != n.id && !pr.IsLearner && (to == raft.None || pr.Match > best) {
			to, best = id, pr.Match
		}
	}
	if to != raft.None {
		n.log.Warn("handing leadership over after a failed log write", zap.String("to", n.memberName(to)))
		n.rn.TransferLeader(to)
	}
}

// A write of the log that takes more than slowSync (a sync takes 0.1-10
// ms on a healthy disk) makes the disk count as busy for slowFor after it
// (diskBusy).
const (
	slowSync = 50 * time.Millisecond
	slowFor  = 2 * time.Second
)

// diskSlow marks the disk busy until t: a write of the log was slow.
func (n *Node) diskSlow(t time.Time) { n.slowUntil.Store(int64(t.Sub(monoBase))) }

// diskBusy reports whether this node is writing a snapshot or a write of
// the log was slow lately: then the log's writes are the append thread's,
// not a transport reader's (kickAppend).
func (n *Node) diskBusy() bool { return n.snapWrites.Load() > 0 || monoNow() < n.slowUntil.Load() }

// setWritingSnap marks a snapshot write begun or ended (calls nest):
// meanwhile the disk is busy (diskBusy).
func (n *Node) setWritingSnap(on bool) {
	if on {
		n.snapWrites.Add(1)
	} else {
		n.snapWrites.Add(-1)
	}
}

// monoBase is the origin of monoNow.
var monoBase = time.Now()

// monoNow is the monotonic clock's time since monoBase, in nanoseconds:
// a deadline kept in it does not move when the wall clock is set.
func monoNow() int64 { return int64(time.Since(monoBase)) }
