package replica

import (
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// TestFollowersHoldSyncs: followers' WALs are marked to hold their syncs
// and the leader's is not (WAL.SetHeld), and a leadership transfer swaps
// them. (Three nodes in one process never take the raw path, canHold;
// TestFollowersHoldSyncsRaw does.)
func TestFollowersHoldSyncs(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := ctxT(t, 20*time.Second)
	check := func(l *Node) {
		t.Helper()
		for _, n := range c.nodes {
			poll(t, 5*time.Second, n.ID()+" holding its syncs as a follower only", func() bool {
				return n.st.wal.Held() == (n != l)
			})
		}
		out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte("k" + l.ID()), Owner: 1, Limit: 1, TTL: time.Minute}, nil)
		if err != nil || out.Result != engine.Granted {
			t.Fatalf("acquire on %s: %+v, %v", l.ID(), out, err)
		}
		waitSame(t, c.nodes...)
	}
	l := c.leader(t)
	check(l)
	var to *Node
	for _, n := range c.nodes {
		if n != l {
			to = n
			break
		}
	}
	if err := l.TransferLeadership(ctx, to.ID()); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, to.ID()+" leading", func() bool { return to.IsLeader() })
	check(to)
}
