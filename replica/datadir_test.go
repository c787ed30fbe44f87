package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// copyFixture copies testdata/name to a new directory and returns it.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "raft")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", name))); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOldRaftDirRefused: a directory written by the release before etcd
// raft (testdata/datadir-bolt: its bbolt raft.db and wal/, written by that
// release) is refused with an error that names it and says what to do,
// and is left exactly as it was.
func TestOldRaftDirRefused(t *testing.T) {
	dir := copyFixture(t, "datadir-bolt")
	before, err := os.ReadFile(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("old0")
	cfg.BindAddr = "127.0.0.1:0"
	cfg.RaftDir = dir
	_, err = DiskStorage(cfg, nil)
	if !errors.Is(err, ErrOldRaftDir) {
		t.Fatalf("DiskStorage on an old dir: %v, want ErrOldRaftDir", err)
	}
	for _, want := range []string{dir, "raft.db", "remove this node", "add it back"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	after, err := os.ReadFile(filepath.Join(dir, "raft.db"))
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("raft.db changed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "FORMAT")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a FORMAT was written into the old dir: %v", err)
	}
}

// TestDataDirFromEarlierRelease: a directory the previous release wrote
// (testdata/datadir-etcd1: a snapshot at 6 and entries up to 8 in the
// log) starts, and every lock it granted is held again by its owner, the
// fence counter where it was.
func TestDataDirFromEarlierRelease(t *testing.T) {
	dir := copyFixture(t, "datadir-etcd1")
	cfg := testConfig("v1")
	cfg.BindAddr = "127.0.0.1:0"
	cfg.RaftDir = dir
	st, err := DiskStorage(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, zap.NewNop(), st)
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	c := &cluster{t: t}
	c.leaderAmong(t, []*Node{n})
	if got := n.FSM().AppliedIndex(); got < 8 {
		t.Fatalf("applied %d, want the log's 8 entries and more", got)
	}
	for i, k := range []string{"k0", "k1", "k2", "k3", "k4"} {
		l, ok := lockHolder(n, k, time.Now().UnixNano())
		if !ok || l.OwnerConnID != uint64(i+1) {
			t.Fatalf("lock %s: held %v by %d, want by %d", k, ok, l.OwnerConnID, i+1)
		}
	}
	if n.FSM().Engine().LastFence() < 1795793672403768692 {
		t.Fatalf("fence counter %d fell below the old node's", n.FSM().Engine().LastFence())
	}
}

// TestWALRecordLayout: a record is written byte for byte as the previous
// release wrote it (the fixture's log).
func TestWALRecordLayout(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "datadir-etcd1", "wal", "00000000000000000002.wal"))
	if err != nil {
		t.Fatal(err)
	}
	for off, i := 0, uint64(2); off < len(b); i++ {
		n, ok := walCheck(b[off:], i)
		if !ok {
			t.Fatalf("record %d at %d does not check", i, off)
		}
		r, err := decodeRecord(b[off+walHeaderSize:off+n], i)
		if err != nil {
			t.Fatal(err)
		}
		if got := walAppend(nil, r); !bytes.Equal(got, b[off:off+n]) {
			t.Fatalf("record %d: written as\n%x\nwas\n%x", i, got, b[off:off+n])
		}
		if binary.LittleEndian.Uint64(b[off+8:]) != i {
			t.Fatalf("record %d: index", i)
		}
		off += n
	}
}
