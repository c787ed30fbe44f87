package replica

import (
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
)

// A snapshot from the leader: its state is kept aside while raft decides
// whether to take it in (stashState, pinStash), then written and restored
// (installSnapshot).

// installSnapshot persists a snapshot received from the leader, has the
// apply thread restore it (after what it is applying), and replaces the
// in-memory log.
func (n *Node) installSnapshot(snap *raftpb.Snapshot) error {
	snap, serr := n.stashed(snap)
	if serr != nil {
		return serr
	}
	// This node's own, older snapshot may still be being written: no
	// need to wait for it. The newest file, which a restart loads, is
	// this one, and that writer's compaction then finds nothing to delete.
	n.setWritingSnap(true)
	err := n.st.saveSnapshot(snap, n.cfg.SnapshotRetain)
	n.setWritingSnap(false)
	if err != nil {
		return err
	}
	if err := n.st.wal.DeleteRange(0, ^uint64(0)); err != nil {
		return err
	}
	n.applyQ.push(&raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), Snapshot: snap})
	select {
	case err := <-n.restored:
		if err != nil {
			return err
		}
	case <-n.stop:
		return ErrClosed
	}
	if err := n.mem.ApplySnapshot(memSnapshot(snap)); err != nil {
		return err
	}
	n.keepSnap(snap)
	return nil
}

// stashState keeps aside the state of a snapshot m brings from the leader
// and returns m without it for raft, which would copy it twice on its
// goroutine (tens of megabytes, unpreemptible). installSnapshot takes it
// back (stashed). A state stays only if raft takes its snapshot in: the
// drain after the step pins it (pinStash) and drops the rest
// (dropUnpinned). Under mu, with the step it is for.
func (n *Node) stashState(m *raftpb.Message) *raftpb.Message {
	snap := m.GetSnapshot()
	if m.GetType() != raftpb.MessageType_MsgSnap || len(snap.GetData()) == 0 {
		return m
	}
	n.stashMu.Lock()
	n.stash = append(n.stash, stashEntry{snap: snap})
	n.stashMu.Unlock()
	// m is the transport's, decoded for this call alone: raft gets it
	// with the metadata only (memSnapshot).
	m.Snapshot = memSnapshot(snap)
	return m
}

// stashEntry is a snapshot's state kept aside from raft (stashState).
type stashEntry struct {
	snap   *raftpb.Snapshot
	pinned bool // raft handed its snapshot to the append thread: installSnapshot takes it
}

// pinStash keeps the state of snap, which raft hands to the append thread
// without it, for installSnapshot. Under mu.
func (n *Node) pinStash(snap *raftpb.Snapshot) {
	n.stashMu.Lock()
	defer n.stashMu.Unlock()
	for i := range n.stash {
		e := &n.stash[i]
		if !e.pinned && sameSnap(e.snap, snap) {
			e.pinned = true
			return
		}
	}
}

// dropUnpinned drops the states of snapshots raft did not take in (it will
// never ask for them). Under mu, after a step and its drain.
func (n *Node) dropUnpinned() {
	n.stashMu.Lock()
	defer n.stashMu.Unlock()
	n.stash = slices.DeleteFunc(n.stash, func(e stashEntry) bool { return !e.pinned })
}

// stashed returns snap, from raft, with the state stashState kept for it
// (snap itself when it has its state). A state that is not there is a
// bug: the install fails, and with it the node's appends (appendBatch).
func (n *Node) stashed(snap *raftpb.Snapshot) (*raftpb.Snapshot, error) {
	if len(snap.GetData()) > 0 {
		return snap, nil
	}
	n.stashMu.Lock()
	defer n.stashMu.Unlock()
	for i, e := range n.stash {
		if e.pinned && sameSnap(e.snap, snap) {
			n.stash = slices.Delete(n.stash, i, i+1)
			return &raftpb.Snapshot{Data: e.snap.GetData(), Metadata: snap.GetMetadata()}, nil
		}
	}
	return nil, fmt.Errorf("replica: the state of snapshot %d (term %d) is not here", snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm())
}

// sameSnap reports whether a and b are the snapshot at one index and term.
func sameSnap(a, b *raftpb.Snapshot) bool {
	return a.GetMetadata().GetIndex() == b.GetMetadata().GetIndex() && a.GetMetadata().GetTerm() == b.GetMetadata().GetTerm()
}
