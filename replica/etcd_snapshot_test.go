//go:build !hashicorpraft

package replica

import (
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

// snapState reads what the apply thread knows of the last snapshot.
func snapState(n *Node) (index, size, logged uint64) {
	n.applyRun.Lock()
	defer n.applyRun.Unlock()
	return n.snapIndex, n.snapBytes, n.logBytes
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
	// One more snapshot after the state grew (the count is past due).
	renew("k", out.Token)
	idx, size, _ := snapState(l)
	if size <= snapSizeFloor {
		t.Fatalf("the state is only %d bytes, under the floor of %d", size, snapSizeFloor)
	}
	// 60 entries: four thresholds' worth, far less log than the state.
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
