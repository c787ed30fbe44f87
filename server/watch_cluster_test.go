package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"

	"github.com/latchd/latchd/server/servertest"
)

// TestClusterFollowerWatchOrder: a watcher on a follower sees the same
// events, in the same order, as one on the leader: both come from the
// entries each node applies.
func TestClusterFollowerWatchOrder(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	fi := (li + 1) % len(ms)
	watch := func(addr string) *client {
		w := dial(t, addr)
		if got := w.do("watch", "c/", "prefix"); got != "ok" {
			t.Fatalf("watch on %s: %q", addr, got)
		}
		if got := w.line(); !strings.HasPrefix(got, "event synced ") {
			t.Fatalf("first event %q", got)
		}
		return w
	}
	lw, fw := watch(ms[li].Addr), watch(ms[fi].Addr)
	a, b := dial(t, ms[li].Addr), dial(t, ms[li].Addr)
	tok := grant(t, a.do("l", "c/1", "0"), "ok")
	grant(t, b.do("l", "c/2", "0"), "ok")
	a.req("l", "c/2", "10")
	b.req("l", "c/1", "10")
	eng := ms[li].Node.FSM().Engine()
	testutil.Eventually(t, 30*time.Second, func() bool {
		l := eng.Snapshot(0).Locks
		return len(l) == 2 && l[0].Waiters == 1 && l[1].Waiters == 1
	}, "a and b queued")
	if got := dial(t, ms[li].Addr).do("r", "c/1", tok); got != "ok" { // a waits: another connection releases
		t.Fatal(got)
	}
	_ = b.c.Close()
	grant(t, a.line(), "ok") // c/2, freed by b's disconnect
	// granted 1, granted 2, waiters 2, waiters 1, released 1, granted 1
	// (b), then b's disconnect: dropped 1, dropped 2, granted 2 (a).
	const n = 9
	for i := range n {
		l, f := lw.line(), fw.line()
		if l != f {
			t.Fatalf("event %d: leader %q, follower %q", i, l, f)
		}
		if !strings.HasPrefix(l, "event ") {
			t.Fatalf("event %d: %q", i, l)
		}
	}
}
