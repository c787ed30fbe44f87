package replica

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"go.uber.org/zap"
)

// TestFollowersHoldSyncsRaw runs a cluster whose followers really take the
// held (raw) write and sync path: in-process clusters never do, since
// canHold refuses with more than one live node, so TestFollowersHoldSyncs
// only checks the flag. Here liveNodes is forced down to 1 for the test.
// The followers' logs and hard states must read back, live and after a
// reopen, and hold what the leader committed.
func TestFollowersHoldSyncsRaw(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("held calls need GOMAXPROCS > 1")
	}
	c := newCluster(t, 3, nil)
	saved := liveNodes.Load()
	liveNodes.Store(1)
	t.Cleanup(func() { liveNodes.Store(saved) }) // before the cluster's shutdown
	if !canHold() {
		t.Fatal("canHold false with liveNodes forced to 1")
	}
	ctx := ctxT(t, 30*time.Second)
	l := c.leader(t)
	for _, n := range c.nodes {
		poll(t, 5*time.Second, n.ID()+" holding as a follower", func() bool { return n.st.wal.Held() == (n != l) })
	}
	for i := range 200 {
		out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte(fmt.Sprint("k", i)), Owner: 1, Limit: 1, TTL: time.Minute}, nil)
		if err != nil || out.Result != engine.Granted {
			t.Fatalf("acquire %d: %+v, %v", i, out, err)
		}
	}
	waitSame(t, c.nodes...)
	last, _ := l.st.wal.LastIndex()
	for i, n := range c.nodes {
		if n == l {
			continue
		}
		if nl, _ := n.st.wal.LastIndex(); nl != last {
			t.Fatalf("%s: last index %d, leader's %d", n.ID(), nl, last)
		}
		if _, err := n.st.readEntries(0); err != nil {
			t.Fatalf("%s: live log: %v", n.ID(), err)
		}
		if _, err := n.st.readHardState(); err != nil {
			t.Fatalf("%s: live hard state: %v", n.ID(), err)
		}
		dir := n.st.dir
		c.kill(t, i)
		cfg := testConfig(n.ID())
		cfg.RaftDir, cfg.BindAddr = dir, c.addrs[i]
		st, err := DiskStorage(cfg, zap.NewNop())
		if err != nil {
			t.Fatalf("%s: reopen: %v", n.ID(), err)
		}
		ents, err := st.readEntries(0)
		hs, herr := st.readHardState()
		_ = st.Close()
		if err != nil || herr != nil {
			t.Fatalf("%s: reopened log: %v; hard state: %v", n.ID(), err, herr)
		}
		if len(ents) == 0 || ents[len(ents)-1].GetIndex() != last {
			t.Fatalf("%s: reopened log ends at %v, want %d", n.ID(), len(ents), last)
		}
		if hs.GetCommit() == 0 || hs.GetCommit() > last {
			t.Fatalf("%s: reopened commit %d, last %d", n.ID(), hs.GetCommit(), last)
		}
		break // one follower is enough; the other keeps the quorum
	}
}
