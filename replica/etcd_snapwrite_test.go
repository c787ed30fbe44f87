//go:build !hashicorpraft

package replica

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

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
		{Data: []byte{}, Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(3)}},      // an empty one
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
		Context: []byte("ctx"), Snapshot: testSnapshot(1 << 20)}
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
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
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
