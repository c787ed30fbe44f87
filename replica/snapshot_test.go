package replica

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"go.etcd.io/raft/v3/raftpb"
)

// snapState reads what the apply thread knows of the last snapshot.
func snapState(n *Node) (index, size, logged uint64) {
	n.applyRun.Lock()
	defer n.applyRun.Unlock()
	return n.snapIndex, n.snapBytes.Load(), n.logBytes
}

// A state past snapSizeFloor is snapshotted when the log applied since
// the last snapshot is as large as that snapshot, not every
// SnapshotThreshold entries: at a fixed count a large state made copying
// it the node's main work. A small one keeps the count alone.
func TestSnapshotOfALargeStateFollowsTheLog(t *testing.T) {
	floor := snapSizeFloor
	snapSizeFloor = 4 << 10
	t.Cleanup(func() { snapSizeFloor = floor })
	c := newCluster(t, 1, func(cfg *Config) { cfg.SnapshotThreshold = 16 })
	l := c.leader(t)
	ctx := ctxT(t, 30*time.Second)
	renew := func(key string, tok fence.Token) {
		t.Helper()
		if _, err := l.Renew(ctx, []byte(key), tok, time.Hour, 1); err != nil {
			t.Fatalf("Renew: %v", err)
		}
	}

	// Small: the count alone.
	out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1, TTL: time.Hour}, nil)
	if err != nil || out.Result != engine.Granted {
		t.Fatalf("Acquire: %v %v", out, err)
	}
	before, _, _ := snapState(l)
	for range 40 {
		renew("k", out.Token)
	}
	if idx, _, _ := snapState(l); idx == before {
		t.Fatalf("a small state was not snapshotted in 40 entries (threshold 16): still at %d", idx)
	}

	// Large: 400 held locks, each with its key, about 20 KB of state.
	for i := range 400 {
		o, err := l.Acquire(ctx, engine.AcquireReq{Key: fmt.Appendf(nil, "held-%03d-%040d", i, i), Owner: engine.OwnerID(10 + i), Limit: 1, TTL: time.Hour}, nil)
		if err != nil || o.Result != engine.Granted {
			t.Fatalf("Acquire %d: %v %v", i, o, err)
		}
	}
	// A snapshot of the grown state, written: the baseline.
	if err := snapshotNow(l); err != nil {
		t.Fatal(err)
	}
	idx, size, _ := snapState(l)
	if size <= snapSizeFloor {
		t.Fatalf("the state is only %d bytes, under the floor of %d", size, snapSizeFloor)
	}
	// 60 entries: almost four thresholds' worth, far less log than the
	// state (about 60 bytes each against 20 KB).
	for range 60 {
		renew("k", out.Token)
	}
	now, _, logged := snapState(l)
	if now != idx {
		t.Fatalf("a %d-byte state was snapshotted again after %d bytes of log (at %d, then %d)", size, logged, idx, now)
	}
	if logged == 0 || logged >= size {
		t.Fatalf("log applied since the snapshot: %d bytes, want between 0 and %d", logged, size)
	}
	// As much log as the state: due.
	for i := 0; ; i++ {
		renew("k", out.Token)
		if now, _, _ := snapState(l); now != idx {
			break
		}
		if i > 10000 {
			t.Fatalf("no snapshot after %d entries", i)
		}
	}
	if _, _, logged := snapState(l); logged != 0 {
		t.Fatalf("log bytes since the new snapshot: %d, want 0", logged)
	}
	// Its write runs on its own goroutine: wait for it, then the files.
	// (An inline apply that finds a snapshot due hands it to the apply
	// thread, so the loop above may be an entry or two past it.)
	l.snapMu.Lock()
	l.snapMu.Unlock() //nolint:staticcheck // waiting for the writer
	snap, err := l.st.loadSnapshot()
	if err != nil || snap == nil {
		t.Fatalf("loadSnapshot: %v %v", snap, err)
	}
	if got, _, _ := snapState(l); snap.GetMetadata().GetIndex() != got {
		t.Fatalf("the newest snapshot on disk is at %d, the last taken at %d", snap.GetMetadata().GetIndex(), got)
	}
}

// brokenSnapshots starts a one-node cluster that snapshots every 16
// entries, holding a lock k, whose snapshot directory is a file (every
// snapshot write fails until dir is a directory again); renew adds an
// entry.
func brokenSnapshots(t *testing.T) (l *Node, renew func(), dir string) {
	t.Helper()
	c := newCluster(t, 1, func(cfg *Config) { cfg.SnapshotThreshold = 16; cfg.TrailingLogs = 0 })
	l = c.leader(t)
	ctx := ctxT(t, 30*time.Second)
	out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1, TTL: time.Hour}, nil)
	if err != nil || out.Result != engine.Granted {
		t.Fatalf("Acquire: %v %v", out, err)
	}
	renew = func() {
		t.Helper()
		if _, err := l.Renew(ctx, []byte("k"), out.Token, time.Hour, 1); err != nil {
			t.Fatalf("Renew: %v", err)
		}
	}
	// The snapshot directory becomes a file: every write fails.
	dir = filepath.Join(l.st.dir, "snap")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return l, renew, dir
}

// A snapshot whose write fails is tried again after a pause that doubles
// with each failure in a row (a broken disk does not have every apply copy
// the state), and the retry comes without further traffic; the log
// behind it stays: nothing is compacted past what is on disk.
func TestSnapshotWriteFailureRetries(t *testing.T) {
	l, renew, dir := brokenSnapshots(t)
	first, _ := l.mem.FirstIndex()
	for i := 0; l.Status().SnapshotWriteFailures == 0; i++ {
		renew()
		if i > 200 {
			t.Fatal("no failed snapshot write after 200 entries (threshold 16)")
		}
	}
	// Entries for 300 ms (and at least 8: without the pause every apply
	// tries again): the pauses (50, 100, 200 ms...) leave room for a few
	// retries, about log2(elapsed/50 ms + 1) of them after the first.
	start := time.Now()
	entries := 0
	for time.Since(start) < 300*time.Millisecond || entries < 8 {
		renew()
		entries++
	}
	elapsed := time.Since(start)
	fails := l.Status().SnapshotWriteFailures
	allowed := 2 + uint64(math.Log2(float64(elapsed)/float64(snapRetryMin)+1))
	if fails > allowed {
		t.Fatalf("%d failed writes in %v of %d entries; want the retries paused (at most %d)", fails, elapsed, entries, allowed)
	}
	if now, _ := l.mem.FirstIndex(); now != first {
		t.Fatalf("the log was compacted from %d to %d behind a snapshot that is not on disk", first, now)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// No more entries: the retry's own timer wakes the apply thread, which
	// takes it at the same index if no entry came since (the state in
	// raft's storage already is that snapshot: it is written again).
	poll(t, 10*time.Second, "snapshot on disk after the retry", func() bool {
		snap, err := l.st.loadSnapshot()
		return err == nil && snap != nil
	}, func() string { return fmt.Sprint(l.Status().SnapshotWriteFailures, " failed writes") })
	poll(t, 5*time.Second, "the log compacted behind it", func() bool {
		now, _ := l.mem.FirstIndex()
		return now > first
	})
	poll(t, 5*time.Second, "the pause cleared by the good write", func() bool { return l.snapRetry.Load() == 0 })
}

// A snapshot raft asks for (to send: from memory, whether or not it
// reaches the disk) is taken at once, even in the pause after a failed
// write.
func TestWantedSnapshotSkipsTheRetryPause(t *testing.T) {
	l, renew, _ := brokenSnapshots(t)
	l.snapMu.Lock()
	l.snapPause = snapRetryMax // the next failure pauses for the longest
	l.snapMu.Unlock()
	for i := 0; l.Status().SnapshotWriteFailures == 0; i++ {
		renew()
		if i > 200 {
			t.Fatal("no failed snapshot write after 200 entries (threshold 16)")
		}
	}
	for range 20 {
		renew()
	}
	applied := l.fsm.AppliedIndex()
	l.wantSnapshot()
	poll(t, snapRetryMax/2, "snapshot at the applied index, wanted in the pause", func() bool {
		return l.snap.Load().GetMetadata().GetIndex() >= applied
	}, func() string {
		return fmt.Sprint("last taken at ", l.snap.Load().GetMetadata().GetIndex(), ", applied ", applied)
	})
}

// The snapshot raft sends a lagging follower is the last one taken, not
// a copy made on raft's goroutine (which would stall raft, heartbeats
// included, for as long as a large state takes to copy); only when the
// configuration changed since does it ask the apply thread for a fresh
// one, and raft asks again meanwhile.
func TestSnapshotToSendIsTheLastTaken(t *testing.T) {
	c := newCluster(t, 1, nil)
	l := c.leader(t)
	ctx := ctxT(t, 30*time.Second)
	out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1, TTL: time.Hour}, nil)
	if err != nil || out.Result != engine.Granted {
		t.Fatalf("Acquire: %v %v", out, err)
	}
	if err := snapshotNow(l); err != nil {
		t.Fatal(err)
	}
	taken, _, _ := snapState(l)
	for range 5 {
		if _, err := l.Renew(ctx, []byte("k"), out.Token, time.Hour, 1); err != nil {
			t.Fatalf("Renew: %v", err)
		}
	}
	st := snapStorage{MemoryStorage: l.mem, n: l}
	snap, err := st.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if got := snap.GetMetadata().GetIndex(); got != taken {
		t.Fatalf("raft got a snapshot at %d, want the last one taken, at %d (applied: %d)", got, taken, l.fsm.AppliedIndex())
	}
	// Not a copy: raft calls Snapshot on its own goroutine, and a copy
	// of a large state there held up heartbeats and appends (55-130 ms
	// for 20 MB). Nor does MemoryStorage keep one: it clones what it
	// holds on every call.
	if again, _ := st.Snapshot(); again != snap || len(snap.GetData()) == 0 {
		t.Fatalf("two calls gave %p and %p (%d bytes): want the node's own snapshot each time", snap, again, len(snap.GetData()))
	}
	if held, _ := l.mem.Snapshot(); len(held.GetData()) != 0 {
		t.Fatalf("MemoryStorage holds %d bytes of state; want its metadata only", len(held.GetData()))
	}

	// A learner joins: the last snapshot does not name it.
	if err := l.AddLearner(ctx, "n9", freeAddr(t)); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	learner := raftID("n9")
	names := func(s *raftpb.Snapshot) bool {
		return slices.Contains(s.GetMetadata().GetConfState().GetLearners(), learner)
	}
	if snap, err := st.Snapshot(); err == nil && !names(snap) {
		t.Fatalf("raft got a snapshot at %d that does not name the learner", snap.GetMetadata().GetIndex())
	}
	poll(t, 5*time.Second, "a snapshot naming the learner", func() bool {
		snap, err := st.Snapshot()
		return err == nil && names(snap)
	})
}
