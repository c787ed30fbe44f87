//go:build hashicorpraft

package replica

import (
	"path/filepath"
	"testing"
	"time"
)

// A raft dir from before the WAL keeps its log: DiskStorage moves the
// entries out of raft.db.
func TestWALMovesBoltLog(t *testing.T) {
	dir := t.TempDir()
	bolt, err := OpenBoltStore(filepath.Join(dir, "raft.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.StoreLogs(walLogs(10, 40, 0)); err != nil {
		t.Fatal(err)
	}
	// A gap, as an old snapshot install left: what follows it is kept.
	if err := bolt.StoreLogs(walLogs(60, 2100, 0)); err != nil {
		t.Fatal(err)
	}
	w := openWAL(t, filepath.Join(dir, "wal"), 0)
	if err := moveLogs(bolt, w); err != nil {
		t.Fatal(err)
	}
	checkWAL(t, w, 60, 2100, gen0)
	if f, _ := bolt.FirstIndex(); f != 0 {
		t.Fatalf("raft.db still holds entries from %d", f)
	}
	// Moving again (nothing left in bbolt) changes nothing.
	if err := moveLogs(bolt, w); err != nil {
		t.Fatal(err)
	}
	checkWAL(t, w, 60, 2100, gen0)
	if err := bolt.Close(); err != nil {
		t.Fatal(err)
	}
}

// A crash part way through the move (some batches in the WAL, bbolt
// still holding everything) loses nothing: the next start moves it all
// again. A review found the first version kept the partial WAL.
func TestWALMoveResumesAfterCrash(t *testing.T) {
	dir := t.TempDir()
	bolt, err := OpenBoltStore(filepath.Join(dir, "raft.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	if err := bolt.StoreLogs(walLogs(1, 3000, 0)); err != nil {
		t.Fatal(err)
	}
	w := openWAL(t, filepath.Join(dir, "wal"), 0)
	if err := w.StoreLogs(walLogs(1, 1024, 0)); err != nil { // the first batch, then the crash
		t.Fatal(err)
	}
	w = reopenWAL(t, w, 0)
	if err := moveLogs(bolt, w); err != nil {
		t.Fatal(err)
	}
	checkWAL(t, w, 1, 3000, gen0)
}
