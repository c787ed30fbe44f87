package replica

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/latchd/latchd/engine"
)

// Snapshot data: "LTCHETCD" 1, the members (uvarint count; raft ID as
// uvarint, node ID, raft address, suffrage), then the FSM's state.
const etcdSnapMagic = "LTCHETCD\x01"

// bootstrapSnapshot is a bootstrapping node's first snapshot: index 1,
// term 1, cfg.Peers as the voters and an empty state. Every initial peer
// writes the same one.
func (n *Node) bootstrapSnapshot() *raftpb.Snapshot {
	cs := &raftpb.ConfState{}
	peers := slices.Clone(n.cfg.Peers)
	slices.SortFunc(peers, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	book := make(map[uint64]Member)
	for _, p := range peers {
		id := raftID(p.ID)
		cs.Voters = append(cs.Voters, id)
		book[id] = Member{ID: p.ID, RaftAddr: p.RaftAddr, Suffrage: "voter"}
	}
	data := n.fsm.appendState(appendSnapHeader(nil, book))
	return &raftpb.Snapshot{Data: data,
		Metadata: &raftpb.SnapshotMetadata{ConfState: cs, Index: new(uint64(1)), Term: new(uint64(1))}}
}

// appendSnapHeader appends a snapshot's magic and members to b; the FSM's
// state follows them.
func appendSnapHeader(b []byte, book map[uint64]Member) []byte {
	ids := slices.Sorted(maps.Keys(book))
	b = append(b, etcdSnapMagic...)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		m := book[id]
		b = binary.AppendUvarint(b, id)
		b = appendString(b, m.ID)
		b = appendString(b, m.RaftAddr)
		b = appendString(b, m.Suffrage)
	}
	return b
}

// restoreSnapshot loads snap's members and FSM state.
func (n *Node) restoreSnapshot(snap *raftpb.Snapshot) error {
	data := snap.GetData()
	if err := newerSnapshot(data); err != nil {
		return err
	}
	if len(data) < len(etcdSnapMagic) || string(data[:len(etcdSnapMagic)]) != etcdSnapMagic {
		return ErrBadSnapshot
	}
	d := decoder{b: data[len(etcdSnapMagic):]}
	cnt := d.uvarint()
	if cnt > uint64(len(d.b)) {
		return ErrBadSnapshot
	}
	book := make(map[uint64]Member, cnt)
	for range cnt {
		id := d.uvarint()
		book[id] = Member{ID: string(d.bytes()), RaftAddr: string(d.bytes()), Suffrage: string(d.bytes())}
	}
	if d.bad {
		return ErrBadSnapshot
	}
	if err := n.fsm.Restore(d.b); err != nil {
		return err
	}
	if n.fsm.AppliedIndex() < snap.GetMetadata().GetIndex() {
		n.fsm.skipEntry(snap.GetMetadata().GetIndex())
	}
	n.bookMu.Lock()
	old := n.book
	n.book = book
	n.confState = proto.Clone(snap.GetMetadata().GetConfState()).(*raftpb.ConfState)
	n.bookMu.Unlock()
	if n.tr != nil {
		for id := range old {
			if _, ok := book[id]; !ok {
				n.tr.removePeer(id)
			}
		}
		for id, m := range book {
			if id != n.id {
				n.tr.setPeer(id, m.RaftAddr)
			}
		}
	}
	return nil
}

// snapshotDue reports whether a snapshot is due. Under applyRun.
//
// A small state (up to snapSizeFloor) is snapshotted every
// SnapshotThreshold entries; a larger one also waits until the log
// applied since is as large as the last snapshot (copying the state then
// costs about what writing the log did), but never past snapMaxSpan
// thresholds (raft keeps those entries in memory). Raft asking for a
// snapshot to send makes one due at once.
func (n *Node) snapshotDue() bool {
	if n.snapWant.Load() {
		return true
	}
	if at := n.snapRetry.Load(); at != 0 {
		return monoNow() >= at // the last write failed: due once its pause is over (writeSnapshot)
	}
	since := n.fsm.AppliedIndex() - min(n.snapIndex, n.fsm.AppliedIndex())
	switch {
	case since < n.cfg.SnapshotThreshold:
		return false
	case since >= snapMaxSpan*n.cfg.SnapshotThreshold:
		return true
	}
	size := n.snapBytes.Load()
	return size <= snapSizeFloor || n.logBytes >= size
}

// snapRetryMin and snapRetryMax bound the pause before a snapshot write
// that failed is tried again: it doubles with each failure in a row.
const (
	snapRetryMin = 50 * time.Millisecond
	snapRetryMax = 5 * time.Second
)

// snapMaxSpan bounds the entries between two snapshots, in
// SnapshotThresholds.
const snapMaxSpan = 16

// snapSizeFloor is the state size up to which snapshots follow
// SnapshotThreshold alone (copying 1 MiB takes a few milliseconds).
var snapSizeFloor uint64 = 1 << 20 // a variable for tests

// maybeSnapshot takes a snapshot when one is due, or at once with force
// (tests). The state is captured here, under applyRun; writeSnapshot
// writes it and compacts the log on a goroutine of its own, so the
// applies go on. One write at a time: a snapshot due meanwhile waits for
// a later apply; force waits for that write, and for its own.
func (n *Node) maybeSnapshot(force bool) {
	if force {
		n.snapMu.Lock()
	} else if !n.snapshotDue() || !n.snapMu.TryLock() {
		return
	}
	applied := n.fsm.AppliedIndex()
	if li, _ := n.mem.LastIndex(); applied > li {
		n.snapMu.Unlock()
		return // applied before this node's own append finished: next time
	}
	start := time.Now()
	c := n.captureSnapshot()
	n.snapIndex, n.logBytes = c.idx, 0
	n.snapWant.Store(false)
	go n.writeSnapshot(c, time.Since(start)) // unlocks snapMu
	if force {
		n.snapMu.Lock()
		n.snapMu.Unlock()
	}
}

// snapCapture is a snapshot begun on the apply thread and finished by
// writeSnapshot: its members and FSM header, and the engine's capture.
type snapCapture struct {
	idx  uint64
	cs   *raftpb.ConfState
	head []byte
	eng  *engine.StateCapture
}

// captureSnapshot begins a snapshot at the applied index: the members,
// the configuration and the FSM header now, the engine's state shard by
// shard as the applies that follow change it or as the writer finishes
// it (engine.StateCapture). Under applyRun.
func (n *Node) captureSnapshot() *snapCapture {
	n.applyMu.Lock()
	defer n.applyMu.Unlock()
	n.bookMu.Lock()
	head := appendSnapHeader(nil, n.book)
	cs := proto.Clone(n.confState).(*raftpb.ConfState)
	n.bookMu.Unlock()
	head, idx, c := n.fsm.captureState(head)
	n.encoding.Store(true)
	return &snapCapture{idx: idx, cs: cs, head: head, eng: c}
}

// writeSnapshot writes snap durably, compacts the log behind it and
// releases snapMu, which maybeSnapshot took for it.
func (n *Node) writeSnapshot(c *snapCapture, captured time.Duration) {
	failed := false
	defer func() {
		if !failed {
			n.snapPause = 0
			n.snapRetry.Store(0)
			n.snapMu.Unlock()
			return
		}
		// Due again after a pause that doubles with each failure in a
		// row, so that a full disk does not have every apply copy the
		// state; the wake comes at the pause's end, after snapMu is free.
		pause := min(max(2*n.snapPause, snapRetryMin), snapRetryMax)
		n.snapPause = pause
		n.snapRetry.Store(monoNow() + int64(pause))
		n.snapMu.Unlock()
		time.AfterFunc(pause, n.applyQ.signal)
	}()
	start := time.Now()
	data := c.eng.Finish(c.head)
	n.encoding.Store(false)
	encoded := time.Since(start)
	// MemoryStorage gets the snapshot without its state (it would clone
	// the whole of it here, and again for every Snapshot call); the
	// whole one is kept in n.snap for raft to send (snapStorage).
	meta, err := n.mem.CreateSnapshot(c.idx, c.cs, nil)
	var snap *raftpb.Snapshot
	if err == nil {
		snap = &raftpb.Snapshot{Data: data, Metadata: meta.GetMetadata()}
		n.keepSnap(snap)
	} else if errors.Is(err, raft.ErrSnapOutOfDate) {
		// Ours, if a write of this index failed and its retry found no
		// newer entry to take: write it again. Not if a newer one from
		// the leader is being installed (MemoryStorage has it first).
		held, _ := n.mem.Snapshot() // metadata only: cheap
		if own := n.snap.Load(); own != nil && own.GetMetadata().GetIndex() == c.idx && held.GetMetadata().GetIndex() == c.idx {
			snap, err = own, nil
		}
	}
	if err != nil {
		// ErrSnapOutOfDate: a newer snapshot, from the leader, was
		// restored meanwhile.
		n.log.Debug("snapshot dropped", zap.Uint64("index", c.idx), zap.Error(err))
		return
	}
	n.snapBytes.Store(uint64(len(data)))
	n.setWritingSnap(true)
	err = n.st.saveSnapshot(snap, n.cfg.SnapshotRetain)
	n.setWritingSnap(false)
	if err != nil {
		n.log.Warn("snapshot write failed", zap.Error(err))
		n.snapFails.Add(1)
		failed = true
		return
	}
	idx := c.idx
	n.log.Info("snapshot taken", zap.String("node_id", n.cfg.NodeID), zap.Uint64("index", idx),
		zap.Int("bytes", len(data)), zap.Duration("capture", captured), zap.Duration("encode", encoded),
		zap.Duration("write", time.Since(start)-encoded))
	if idx > n.cfg.TrailingLogs {
		to := idx - n.cfg.TrailingLogs
		if first, _ := n.mem.FirstIndex(); to > first {
			_ = n.mem.Compact(to)
			_ = n.st.wal.DeleteRange(0, to)
		}
	}
}

// snapStorage is the MemoryStorage raft reads, except for the snapshot it
// sends a follower. That one is the node's own (MemoryStorage holds only
// its metadata: see memSnapshot), and it must name the cluster's current
// configuration: an older one may predate the follower's own membership,
// and a node refuses a snapshot whose configuration does not name it.
type snapStorage struct {
	*raft.MemoryStorage
	n *Node
}

// Snapshot implements raft.Storage. It runs on raft's goroutine, so it
// never copies the state (that would stall the heartbeats): it returns
// n.snap itself (never changed once stored) when it carries the current
// configuration, and otherwise asks the apply thread for a fresh one and
// reports it temporarily unavailable, so that raft asks again later.
func (s snapStorage) Snapshot() (*raftpb.Snapshot, error) {
	snap := s.n.snap.Load()
	if snap != nil && !raft.IsEmptySnap(snap) && s.n.confIs(snap.GetMetadata().GetConfState()) {
		return snap, nil
	}
	s.n.wantSnapshot()
	return nil, raft.ErrSnapshotTemporarilyUnavailable
}

// memSnapshot is what MemoryStorage gets of snap: a copy of its metadata
// alone. MemoryStorage clones every snapshot, state and all, and fills in
// the metadata it is given; raft reads the state through snapStorage.
func memSnapshot(snap *raftpb.Snapshot) *raftpb.Snapshot {
	return &raftpb.Snapshot{Metadata: proto.Clone(snap.GetMetadata()).(*raftpb.SnapshotMetadata)}
}

// keepSnap makes snap the one raft sends unless a newer one is there: a
// snapshot from the leader may be installed while this node's own, older
// one is still being written.
func (n *Node) keepSnap(snap *raftpb.Snapshot) {
	idx := snap.GetMetadata().GetIndex()
	for {
		old := n.snap.Load()
		if old != nil && old.GetMetadata().GetIndex() >= idx {
			return
		}
		if n.snap.CompareAndSwap(old, snap) {
			return
		}
	}
}

// confIs reports whether cs is the configuration the node has applied.
func (n *Node) confIs(cs *raftpb.ConfState) bool {
	n.bookMu.Lock()
	defer n.bookMu.Unlock()
	return n.confState != nil && n.confState.Equivalent(cs) == nil
}

// wantSnapshot makes a snapshot due at once, even in the pause after a
// failed write (raft sends it from memory whether or not it reaches the
// disk), and wakes the apply thread, which takes it.
func (n *Node) wantSnapshot() {
	n.snapWant.Store(true)
	n.applyQ.signal()
}
