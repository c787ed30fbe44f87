package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// TestTaggedCancelReplicates: in cluster mode a cancel on the leader
// withdraws the wait through the log: the cancel answers "ok", the
// withdrawn request "timeout", every replica's queue drops it, and the
// holder's release grants the next waiter. A set is withdrawn alike. A
// follower answers a cancel error_not_leader with the leader's address.
func TestTaggedCancelReplicates(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	lm := c.Members()[li]
	h, a, b := dial(t, lm.Addr), dial(t, lm.Addr), dial(t, lm.Addr)
	greet(t, a)
	greet(t, b)
	tok := grant(t, h.do("l", "k", "0"), "ok")
	a.req("#a1 l", "k", "60")
	testutil.Eventually(t, 10*time.Second, func() bool { return waitersOn(lm, "k") == 1 }, "a queued")
	b.req("#b1 l", "k", "60")
	a.req("#m ml", "k z", "60 30")
	everyReplica := func(key string, n int) func() bool {
		return func() bool {
			for _, m := range c.Members() {
				if waitersOn(m, key) != n {
					return false
				}
			}
			return true
		}
	}
	testutil.Eventually(t, 10*time.Second, everyReplica("k", 3), "a, b and a's set queued on every replica")
	a.req("#c cancel", "k", "")
	if got := answers(t, a, 2); got["c"] != "ok" || got["a1"] != "timeout" {
		t.Fatalf("cancel answers = %v; want c: ok, a1: timeout", got)
	}
	a.req("#cs cancel", "k", "set")
	if got := answers(t, a, 2); got["cs"] != "ok" || got["m"] != "timeout" {
		t.Fatalf("set cancel answers = %v; want cs: ok, m: timeout", got)
	}
	testutil.Eventually(t, 10*time.Second, everyReplica("k", 1), "every replica keeps only b's wait")
	if got := h.do("r", "k", tok); got != "ok" {
		t.Fatal(got)
	}
	grant(t, answers(t, b, 1)["b1"], "ok")

	f := dial(t, c.Members()[(li+1)%3].Addr)
	greet(t, f)
	if got := tdo(t, f, "c", "cancel", "k", ""); got != "error_not_leader "+lm.Addr {
		t.Fatalf("cancel on a follower = %q; want error_not_leader %s", got, lm.Addr)
	}
	if !strings.HasPrefix(tdo(t, a, "p", "l", "z", "0"), "ok ") {
		t.Fatal("a closed, or its set kept z")
	}
}
