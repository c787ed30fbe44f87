//go:build hashicorpraft

package replica

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
)

// startDiskNode starts a one-node cluster on the bolt log store, file snapshots and
// TCP in dir, bound to bind ("127.0.0.1:0" the first time).
func startDiskNode(t *testing.T, dir, bind string) *Node {
	t.Helper()
	cfg := testConfig("d0")
	cfg.RaftDir = dir
	cfg.BindAddr = bind
	st, err := DiskStorage(cfg, zap.NewNop())
	if err != nil {
		t.Fatalf("DiskStorage: %v", err)
	}
	cfg.Bootstrap = true
	cfg.Peers = []Peer{{ID: cfg.NodeID, RaftAddr: string(st.Transport.LocalAddr()), ClientAddr: "c"}}
	n, err := New(cfg, zap.NewNop(), st)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = n.Shutdown() }) // a second Shutdown is a no-op
	return n
}

// TestDiskRestart writes grants, a snapshot and more grants to disk, then
// restarts the node from its directory: every lease and the fence counter
// are back, and new grants are fenced above the old ones.
func TestDiskRestart(t *testing.T) {
	dir := t.TempDir()
	n := startDiskNode(t, dir, "127.0.0.1:0")
	c := &cluster{t: t}
	c.leaderAmong(t, []*Node{n})
	ctx := ctxT(t, 10*time.Second)
	acq := func(n *Node, key string, owner engine.OwnerID) engine.Outcome {
		t.Helper()
		out, err := n.Acquire(ctx, engine.AcquireReq{Key: []byte(key), Owner: owner, Limit: 1, TTL: time.Minute}, nil)
		if err != nil || out.Result != engine.Granted {
			t.Fatalf("Acquire(%s) = %v, %v; want granted", key, out.Result, err)
		}
		return out
	}
	first := acq(n, "before-snapshot", 1)
	gone := acq(n, "released", 2)
	if err := n.Release(ctx, []byte("released"), gone.Token); err != nil {
		t.Fatal(err)
	}
	if err := n.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	second := acq(n, "after-snapshot", 3)
	lastFence := n.FSM().Engine().LastFence()
	bind := string(n.Raft().Leader())
	if err := n.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*")); len(snaps) == 0 {
		t.Fatal("no snapshot on disk")
	}
	if fi, err := os.Stat(filepath.Join(dir, "raft.db")); err != nil || fi.Size() == 0 {
		t.Fatalf("no log store on disk: %v", err)
	}

	n = startDiskNode(t, dir, bind)
	c.leaderAmong(t, []*Node{n})
	if n.FSM().Restores() != 1 {
		t.Fatalf("restart restored %d snapshots; want 1", n.FSM().Restores())
	}
	// The new leadership's Restamp may raise the counter to the clock.
	if got := n.FSM().Engine().LastFence(); got < lastFence {
		t.Fatalf("fence counter %d after the restart; want at least %d", got, lastFence)
	}
	now := clock.Now()
	for key, owner := range map[string]uint64{"before-snapshot": 1, "after-snapshot": 3} {
		if h, ok := lockHolder(n, key, now); !ok || h.OwnerConnID != owner {
			t.Fatalf("lock %s held by %+v (%v) after the restart; want owner %d", key, h, ok, owner)
		}
	}
	if _, ok := lockHolder(n, "released", now); ok {
		t.Fatal("a released lock is held again after the restart")
	}
	for key, tok := range map[string]engine.Outcome{"before-snapshot": first, "after-snapshot": second} {
		if _, err := n.Renew(ctx, []byte(key), tok.Token, 0, 0); err != nil {
			t.Fatalf("Renew(%s) after the restart: %v", key, err)
		}
	}
	if out := acq(n, "new", 4); out.Token.Fence <= lastFence {
		t.Fatalf("new grant fenced %d, not above %d", out.Token.Fence, lastFence)
	}
}
