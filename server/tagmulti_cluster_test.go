package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// TestTaggedMultiReplicates: in cluster mode a tagged set goes through the
// log: every replica sees its grant and its wait, a later single-key
// request on the same connection is answered while the set waits, and the
// set's tag answers its grant when the key it waits for is released. A
// set retried with its request id gets the first attempt's grant.
func TestTaggedMultiReplicates(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	lm := c.Members()[c.Leader(servertest.LeaderTimeout)]
	a, o := dial(t, lm.Addr), dial(t, lm.Addr)
	greet(t, a)
	toks := grants(t, tdo(t, a, "1", "ml", "p q @3f9a1c0e5d7b2a48.1k", "0 60"), 2)
	again := grants(t, tdo(t, a, "1r", "ml", "p q @3f9a1c0e5d7b2a48.1k", "0 60"), 2)
	if strings.Join(again, " ") != strings.Join(toks, " ") {
		t.Fatalf("retried set by id = %v; want the first grant %v", again, toks)
	}
	tb := grant(t, o.do("l", "b", "0"), "ok")
	a.req("#2 ml", "a b", "60 60")
	testutil.Eventually(t, 10*time.Second, func() bool {
		for _, m := range c.Members() {
			if holderOf(m, "p") == 0 || holderOf(m, "p") != holderOf(m, "q") || waitersOn(m, "a") != 1 {
				return false
			}
		}
		return true
	}, "every replica has the set's grant and the waiting set")
	grant(t, tdo(t, a, "3", "l", "k", "0"), "ok")
	if got := o.do("r", "b", tb); got != "ok" {
		t.Fatal(got)
	}
	grants(t, answers(t, a, 1)["2"], 2)
	owner := holderOf(lm, "p")
	testutil.Eventually(t, 10*time.Second, func() bool {
		for _, m := range c.Members() {
			if holderOf(m, "a") != owner || holderOf(m, "b") != owner {
				return false
			}
		}
		return true
	}, "every replica has the waited set's grant")
}
