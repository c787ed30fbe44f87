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
	h, a, b, tok := holdAndQueue(t, lm.Addr, func(n int) bool { return waitersOn(lm, "k") == n })
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
	withdraw(t, a, "c", "k", "", "a1")
	withdraw(t, a, "cs", "k", "set", "m")
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
