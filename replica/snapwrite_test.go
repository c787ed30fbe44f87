package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/latchd/latchd/engine"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// withUnknown adds a field this raft does not know to snap.
func withUnknown(snap *raftpb.Snapshot) *raftpb.Snapshot {
	b := protowire.AppendTag(nil, 99, protowire.BytesType)
	snap.ProtoReflect().SetUnknown(protowire.AppendBytes(b, []byte("new")))
	return snap
}

func testSnapshot(size int) *raftpb.Snapshot {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 31)
	}
	return &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(12345), Term: proto.Uint64(7),
		ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{9}, AutoLeave: proto.Bool(false)},
	}}
}

// A snapshot is written, to a file or a peer, from its own state: the
// pieces are its protobuf encoding, byte for byte, and the state piece is
// the snapshot's own bytes.
func TestSnapshotPartsAreItsEncoding(t *testing.T) {
	for _, snap := range []*raftpb.Snapshot{
		testSnapshot(1 << 20),
		testSnapshot(1),
		{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(3), Term: proto.Uint64(1)}}, // no state
		{Data: []byte{}, Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(3)}},        // an empty one
		withUnknown(testSnapshot(100)), // from a newer raft
	} {
		parts, err := snapshotParts(snap)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(snap)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(parts, nil); !bytes.Equal(got, want) {
			t.Fatalf("%d-byte state: the pieces make %d bytes that differ from proto.Marshal's %d", len(snap.GetData()), len(got), len(want))
		}
		if d := snap.GetData(); len(d) > 0 && &parts[1][0] != &d[0] {
			t.Fatal("the state piece is a copy of the state")
		}
	}

	m := &raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
		Term: proto.Uint64(7), LogTerm: proto.Uint64(6), Index: proto.Uint64(12000), Commit: proto.Uint64(12345),
		Context: []byte("ctx"), Snapshot: withUnknown(testSnapshot(1 << 20))}
	m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 5))
	parts, err := snapMessageParts(m)
	if err != nil {
		t.Fatal(err)
	}
	got := &raftpb.Message{}
	if err := proto.Unmarshal(bytes.Join(parts, nil), got); err != nil {
		t.Fatalf("a peer cannot decode the frame: %v", err)
	}
	if !proto.Equal(got, m) {
		t.Fatalf("the peer decodes %v, want %v", got, m)
	}
}

// Saving a snapshot allocates nothing like its size, and the file loads
// back whole.
func TestSaveSnapshotDoesNotCopyTheState(t *testing.T) {
	st := &Storage{dir: t.TempDir()}
	if err := os.Mkdir(filepath.Join(st.dir, "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	snap := testSnapshot(8 << 20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := st.saveSnapshot(snap, 2); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(snap.GetData())/2) { // whatever else runs meanwhile: far less
		t.Fatalf("saving an %d-byte snapshot allocated %d bytes; want its state written as it is", len(snap.GetData()), n)
	}
	got, err := st.loadSnapshot()
	if err != nil || got == nil {
		t.Fatalf("loadSnapshot: %v, %v", got, err)
	}
	if !proto.Equal(got, snap) {
		t.Fatal("the snapshot loaded back differs from the one saved")
	}
}

// A follower writing a snapshot leaves its log's writes to its append
// thread, so that a slow sync (its disk busy with the snapshot) does not
// keep its transport reader from the leader's heartbeats. Here both
// followers' syncs take four election timeouts while they write
// snapshots; appending on their readers, they stopped hearing the leader,
// and it stepped down.
func TestFollowersWritingSnapshotsKeepHearingTheLeader(t *testing.T) {
	// A long election timeout (heartbeats every fifth of it): a follower
	// that only runs late (a loaded machine, the race detector) keeps
	// hearing the leader in time; one stuck in a sync for three election
	// timeouts does not.
	c := newDiskCluster(t, 3, func(cfg *Config) {
		cfg.ElectionTimeout = 300 * time.Millisecond
	})
	li := c.leader(t, -1)
	l := c.nodes[li]
	// The lead moves when an election is held: every node's term is the
	// leader's while it has the lead.
	moved := func() bool {
		if !l.IsLeader() {
			return true
		}
		for _, nd := range c.nodes {
			if nd.term.Load() > l.term.Load() {
				return true
			}
		}
		return false
	}
	term := l.term.Load()
	var fs []*Node
	for i, nd := range c.nodes {
		if i != li {
			fs = append(fs, nd)
		}
	}
	for _, f := range fs {
		f.setWritingSnap(true)
		f.st.wal.testSyncDelay.Store(int64(3 * c.nodes[0].cfg.ElectionTimeout))
	}
	defer func() {
		for _, f := range fs {
			f.st.wal.testSyncDelay.Store(0)
			f.setWritingSnap(false)
		}
	}()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // entries for the followers to write, slowly
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = l.Acquire(ctx, engine.AcquireReq{Key: fmt.Appendf(nil, "k%d", i), Owner: 1, Limit: 1, TTL: time.Minute}, nil)
			cancel()
		}
	}()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && !moved() {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	<-done
	if moved() || l.term.Load() != term {
		t.Fatalf("the lead moved while the followers wrote snapshots (n%d still leader: %v; its term %d -> %d)", li+1, l.IsLeader(), term, l.term.Load())
	}
}

// A slow write of the log makes the disk count as busy for a while: the
// next writes are the append thread's and no sync is held, whatever
// made the disk slow.
//
// On a loaded machine the cluster's first writes may themselves take
// longer than slowSync: the follower's disk is then busy for slowFor
// after them, so the test waits for that to pass before it slows the disk.
func TestSlowLogWriteMakesTheDiskBusy(t *testing.T) {
	c := newDiskCluster(t, 3, nil)
	li := c.leader(t, -1)
	f := c.nodes[(li+1)%3]
	poll(t, slowFor+5*time.Second, "the follower's disk idle", func() bool { return !f.diskBusy() })
	f.st.wal.testSyncDelay.Store(int64(slowSync + 10*time.Millisecond))
	defer f.st.wal.testSyncDelay.Store(0)
	if _, err := acq(t, c.nodes[li], "k", 1); err != nil {
		t.Fatal(err)
	}
	poll(t, 5*time.Second, "the follower's disk counted busy after a slow write", f.diskBusy)

	n := &Node{}
	n.diskSlow(time.Now().Add(time.Hour))
	if !n.diskBusy() {
		t.Fatal("not busy while the disk was slow lately")
	}
	n.diskSlow(time.Time{})
	n.setWritingSnap(true)
	n.setWritingSnap(true)
	n.setWritingSnap(false)
	if !n.diskBusy() {
		t.Fatal("not busy while one of two writers is")
	}
	n.setWritingSnap(false)
	if n.diskBusy() {
		t.Fatal("busy once the disk is neither busy nor slow")
	}
}

// A snapshot frame decodes to the message sent, its state left in the
// frame's own bytes (no copy); anything else decodes as proto.Unmarshal
// decodes it.
func TestDecodeMessageLeavesTheStateInTheFrame(t *testing.T) {
	m := &raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
		Term: proto.Uint64(7), Commit: proto.Uint64(99), Snapshot: withUnknown(testSnapshot(1 << 20))}
	parts, err := snapMessageParts(m)
	if err != nil {
		t.Fatal(err)
	}
	marshalled, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"parts": bytes.Join(parts, nil), "proto.Marshal": marshalled} {
		got, err := decodeMessage(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !proto.Equal(got, m) {
			t.Fatalf("%s: decoded a different message", name)
		}
		d := got.GetSnapshot().GetData()
		if p := &d[0]; p == nil || !(uintptr(unsafe.Pointer(p)) >= uintptr(unsafe.Pointer(&b[0])) && uintptr(unsafe.Pointer(p)) < uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b))) {
			t.Fatalf("%s: the state was copied out of the frame", name)
		}
	}
	// A heartbeat, and a snapshot without state: as proto.Unmarshal.
	for _, x := range []*raftpb.Message{
		{Type: raftpb.MessageType_MsgHeartbeat.Enum(), To: proto.Uint64(2), Commit: proto.Uint64(5)},
		{Type: raftpb.MessageType_MsgSnap.Enum(), Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(4)}}},
	} {
		b, _ := proto.Marshal(x)
		got, err := decodeMessage(b)
		if err != nil || !proto.Equal(got, x) {
			t.Fatalf("decodeMessage(%v) = %v, %v", x, got, err)
		}
	}
	if _, err := decodeMessage(marshalled[:len(marshalled)-3]); err == nil {
		t.Fatal("a truncated frame decoded")
	}
}

// FuzzDecodeMessage: whatever the bytes, decodeMessage accepts what
// proto.Unmarshal accepts, with the same message, and refuses the rest.
func FuzzDecodeMessage(f *testing.F) {
	m := &raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), To: proto.Uint64(2), Term: proto.Uint64(3),
		Snapshot: withUnknown(testSnapshot(40))}
	b, _ := proto.Marshal(m)
	f.Add(b)
	parts, _ := snapMessageParts(m)
	f.Add(bytes.Join(parts, nil))
	b, _ = proto.Marshal(&raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), Entries: []*raftpb.Entry{{Data: []byte("x")}}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &raftpb.Message{}
		werr := proto.Unmarshal(b, want)
		got, err := decodeMessage(append([]byte(nil), b...))
		if (werr == nil) != (err == nil) {
			t.Fatalf("proto.Unmarshal: %v; decodeMessage: %v", werr, err)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", got, want)
		}
	})
}

// A follower's raft never holds a snapshot's state: the transport reader
// keeps it aside, and the install takes it back; a state is kept only
// when raft takes its snapshot in.
func TestStashKeepsTheStateFromRaft(t *testing.T) {
	c := newDiskCluster(t, 1, nil)
	n := c.nodes[0]
	snapAt := func(idx uint64) *raftpb.Snapshot {
		s := testSnapshot(1 << 10)
		s.Metadata.Index = proto.Uint64(idx)
		return s
	}
	a, b := snapAt(1000), snapAt(2000)
	n.mu.Lock()
	out := n.stashState(&raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), Snapshot: a})
	n.mu.Unlock()
	if len(out.GetSnapshot().GetData()) != 0 || out.GetSnapshot().GetMetadata().GetIndex() != 1000 {
		t.Fatalf("raft gets a snapshot with %d bytes of state at %d", len(out.GetSnapshot().GetData()), out.GetSnapshot().GetMetadata().GetIndex())
	}
	n.mu.Lock()
	n.pinStash(out.GetSnapshot()) // raft took a in
	n.dropUnpinned()
	n.mu.Unlock()
	n.mu.Lock()
	outB := n.stashState(&raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), Snapshot: b})
	n.dropUnpinned() // raft refused b
	n.mu.Unlock()
	if _, err := n.stashed(outB.GetSnapshot()); err == nil {
		t.Fatal("the state of a snapshot raft refused was kept")
	}
	got, err := n.stashed(out.GetSnapshot())
	if err != nil || &got.GetData()[0] != &a.GetData()[0] {
		t.Fatalf("stashed: %v (want the state itself)", err)
	}
	if _, err := n.stashed(out.GetSnapshot()); err == nil {
		t.Fatal("a state was taken back twice")
	}
}

// Snapshots raft takes in while the append thread is busy are all
// installed, whatever else arrives meanwhile: three in a row, and a stale
// one (an old leader's term) between two. (Keeping the newest two states
// lost the third one back, and the node stopped appending.)
func TestQueuedSnapshotsAllInstall(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprint("stale=", stale), func(t *testing.T) {
			c := newDiskCluster(t, 3, func(cfg *Config) {
				cfg.SnapshotThreshold = 40
				cfg.TrailingLogs = 5
			})
			li := c.leader(t, -1)
			fi := (li + 1) % 3
			l, f := c.nodes[li], c.nodes[fi]
			all := func(uint64) bool { return true }
			f.tr.cut.Store(&all) // the follower hears nothing of the leader's own
			var snaps []*raftpb.Snapshot
			for i := 0; len(snaps) < 3 && i < 2000; i++ {
				o, err := acq(t, l, fmt.Sprint("k", i%7), engine.OwnerID(i+1))
				if err != nil {
					t.Fatal(err)
				}
				if o.Result == engine.Granted {
					_ = l.Release(t.Context(), []byte(fmt.Sprint("k", i%7)), o.Token)
				}
				if s := l.snap.Load(); s != nil && s.GetMetadata().GetIndex() > f.commit.Load()+2 &&
					(len(snaps) == 0 || s.GetMetadata().GetIndex() > snaps[len(snaps)-1].GetMetadata().GetIndex()) {
					snaps = append(snaps, s)
				}
			}
			if len(snaps) < 3 {
				t.Fatalf("only %d snapshots taken", len(snaps))
			}
			term := max(f.term.Load(), l.term.Load()) + 1
			msg := func(term uint64, s *raftpb.Snapshot) *raftpb.Message {
				return &raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), From: proto.Uint64(l.id), To: proto.Uint64(f.id),
					Term: proto.Uint64(term), Snapshot: proto.Clone(s).(*raftpb.Snapshot)}
			}
			f.appRun.Lock() // the append thread busy: the snapshots queue
			f.tr.recv(msg(term, snaps[0]))
			if stale {
				old := msg(1, snaps[1]) // raft drops it: its term is past
				old.Snapshot.Metadata.Index = proto.Uint64(snaps[0].GetMetadata().GetIndex() + 1)
				f.tr.recv(old)
			}
			f.tr.recv(msg(term, snaps[1]))
			f.tr.recv(msg(term, snaps[2]))
			f.appRun.Unlock()
			f.kickAppend(false)
			want := snaps[2].GetMetadata().GetIndex()
			poll(t, 10*time.Second, "the last snapshot installed", func() bool {
				return f.appFailed.Load() || f.fsm.AppliedIndex() >= want
			})
			if f.appFailed.Load() {
				t.Fatal("the follower stopped appending: a queued snapshot's state was gone")
			}
		})
	}
}

// A node whose log write failed says so on /readyz (Node.Ready): it no
// longer acknowledges, and only its log said so before.
func TestLogWriteFailureMakesTheNodeUnready(t *testing.T) {
	c := newDiskCluster(t, 3, nil)
	li := c.leader(t, -1)
	f := c.nodes[(li+1)%3]
	poll(t, 5*time.Second, "the follower ready", func() bool { return f.Ready() == nil })
	f.appendFailed(errors.New("injected: no space left on device"))
	if err := f.Ready(); err == nil || !strings.Contains(err.Error(), "raft log failed") {
		t.Fatalf("Ready after a failed log write: %v", err)
	}
}
