package replica

import (
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

// grantOn acquires key on n for owner and returns the granted token.
func grantOn(t *testing.T, n *Node, key string, owner engine.OwnerID) fence.Token {
	t.Helper()
	out, err := n.Acquire(ctxT(t, 10*time.Second), engine.AcquireReq{Key: []byte(key), Owner: owner, Limit: 1, TTL: time.Minute}, nil)
	if err != nil || out.Result != engine.Granted {
		t.Fatalf("Acquire(%s) = %v, %v; want granted", key, out.Result, err)
	}
	return out.Token
}

// TestFreshClusterFencesAboveClock: a new cluster's first fence is above
// the wall clock (ns) read before it was bootstrapped, as a single node's
// is, and every replica agrees on the counter.
func TestFreshClusterFencesAboveClock(t *testing.T) {
	before := uint64(time.Now().UnixNano())
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	tok := grantOn(t, l, "k", 1)
	if tok.Fence <= before {
		t.Fatalf("first fence %d; want above the clock at bootstrap, %d", tok.Fence, before)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range c.nodes {
		for n.FSM().Engine().LastFence() != tok.Fence {
			if time.Now().After(deadline) {
				t.Fatalf("node %s: last fence %d; want the leader's %d", n.ID(), n.FSM().Engine().LastFence(), tok.Fence)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestRebuiltClusterFencesRise: a cluster started on fresh raft storage
// (its directories rebuilt) issues fences above every fence the old
// cluster issued, so an old token never compares newer than a new one.
func TestRebuiltClusterFencesRise(t *testing.T) {
	old := newCluster(t, 3, nil)
	l := old.leader(t)
	var last fence.Token
	for i := range 5 {
		last = grantOn(t, l, "k", engine.OwnerID(i+1))
		if err := l.Release(ctxT(t, 10*time.Second), []byte("k"), last); err != nil {
			t.Fatal(err)
		}
	}
	old.shutdown()

	rebuilt := newCluster(t, 3, nil)
	if tok := grantOn(t, rebuilt.leader(t), "k", 1); tok.Fence <= last.Fence {
		t.Fatalf("rebuilt cluster's first fence %d; want above the old cluster's last, %d", tok.Fence, last.Fence)
	}
}

// TestFenceFloorConfig: Config.FenceFloor (a single node's fence journal)
// raises the cluster's fences above it even when it is ahead of the clock.
func TestFenceFloorConfig(t *testing.T) {
	floor := uint64(time.Now().Add(24 * time.Hour).UnixNano())
	c := newCluster(t, 3, func(cfg *Config) { cfg.FenceFloor = floor })
	if tok := grantOn(t, c.leader(t), "k", 1); tok.Fence <= floor {
		t.Fatalf("first fence %d; want above the configured floor %d", tok.Fence, floor)
	}
}

// TestRestampFloorReplay: a Restamp raises the fence counter to its floor
// and never lowers it; one without a floor (an entry written before
// floors existed) leaves it alone, so an old log replays as it first ran.
func TestRestampFloorReplay(t *testing.T) {
	f, err := NewFSM(testConfig("n0").Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	index := uint64(0)
	apply := func(c Command) {
		index++
		f.applyEntry(index, AppendCommand(nil, &c))
	}
	apply(Command{Op: OpRestamp, Now: 1e9, Key: []byte("n0")})
	if got := f.Engine().LastFence(); got != 0 {
		t.Fatalf("after a Restamp without a floor: last fence %d; want 0", got)
	}
	apply(Command{Op: OpRestamp, Now: 2e9, Key: []byte("n0"), Token: fence.Token{Fence: 5000}})
	apply(Command{Op: OpRestamp, Now: 3e9, Key: []byte("n1"), Token: fence.Token{Fence: 4000}})
	if got := f.Engine().LastFence(); got != 5000 {
		t.Fatalf("after floors 5000 then 4000: last fence %d; want 5000", got)
	}
	apply(Command{Op: OpAcquire, Now: 3e9, Key: []byte("k"), Owner: 1, Limit: 1, TTL: time.Minute, Salt: 7})
	if got := f.Engine().LastFence(); got != 5001 {
		t.Fatalf("after a grant: last fence %d; want 5001", got)
	}
}
