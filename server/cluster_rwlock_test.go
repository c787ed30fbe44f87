package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// TestClusterRWFailover holds a read-write key by two readers and another
// by a writer, stops the leader, and checks on the new one that both keep
// their mode and their holders' tokens, and that fences keep rising.
func TestClusterRWFailover(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	r1, r2 := dial(t, ms[li].Addr), dial(t, ms[li].Addr)
	line1 := r1.do("rl", "cfg", "0 60")
	t1, t2 := grant(t, line1, "ok"), grant(t, r2.do("rl", "cfg", "0 60"), "ok")
	wline := r1.do("wl", "db", "0 60")
	tw := grant(t, wline, "ok")
	if got := r2.do("rl", "db", "0"); got != "timeout" {
		t.Fatalf("read of a write-held key: %q", got)
	}
	before := fenceOf(t, wline, "ok")
	testutil.Eventually(t, 30*time.Second, func() bool {
		for i, m := range c.Members() {
			if i != li && m.Node.FSM().AppliedIndex() < ms[li].Node.FSM().AppliedIndex() {
				return false
			}
		}
		return true
	}, "followers did not catch up")

	c.Stop(li)
	nl := c.Leader(servertest.LeaderTimeout)
	cl := dial(t, c.Members()[nl].Addr)
	// The readers kept the key: a writer is refused, another reader joins.
	if got := cl.do("wl", "cfg", "0"); got != "timeout" {
		t.Fatalf("write over the kept readers: %q, want timeout", got)
	}
	t3 := grant(t, cl.do("rl", "cfg", "0 60"), "ok")
	if got := cl.do("l", "cfg", "0"); got != "error_limit_mismatch" {
		t.Fatalf("lock on the read-write key: %q", got)
	}
	// The writer kept its key.
	if got := cl.do("rl", "db", "0"); got != "timeout" {
		t.Fatalf("read of the kept write lock: %q, want timeout", got)
	}
	for _, r := range [][2]string{{"cfg", t1}, {"cfg", t2}, {"db", tw}} {
		if got := cl.do("rn", r[0], r[1]+" 60"); !strings.HasPrefix(got, "ok ") {
			t.Fatalf("renew %s with the old token: %q", r[0], got)
		}
	}
	for _, r := range [][2]string{{"cfg", t1}, {"cfg", t2}, {"cfg", t3}, {"db", tw}} {
		if got := cl.do("rr", r[0], r[1]); got != "ok" {
			t.Fatalf("release %s: %q", r[0], got)
		}
	}
	for _, k := range []string{"cfg", "db"} {
		if after := fenceOf(t, cl.do("wl", k, "0 60"), "ok"); after <= before {
			t.Fatalf("write fence on %s now %d, not above %d", k, after, before)
		}
	}
}
