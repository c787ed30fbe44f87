package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// TestTaggedSessionsReplicate: a tagged session's grants, waits and
// releases go through the log: every replica sees the session hold the
// key, and after the leader crashes the session is attached on the new
// leader, where its holder releases by token and its queued wait, granted
// meanwhile, is found held by it.
func TestTaggedSessionsReplicate(t *testing.T) {
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		ServerEdit: func(cfg *server.Config) { cfg.OrphanTTL = 20 * time.Second }})
	li := c.Leader(servertest.LeaderTimeout)
	lm := c.Members()[li]
	a := dial(t, lm.Addr)
	greet(t, a)
	f := strings.Fields(tdo(t, a, "s", "session", "_", ""))
	if len(f) != 3 || f[0] != "ok" {
		t.Fatalf("session _ = %q", f)
	}
	sid := f[1]
	tok := grant(t, tdo(t, a, "1", "l "+sid, "k", "0 60"), "ok")
	a.req("#2 l "+sid, "k", "60 60") // the session waits behind itself
	testutil.Eventually(t, 10*time.Second, func() bool {
		for _, m := range c.Members() {
			if holderOf(m, "k") != holderOf(lm, "k") || waitersOn(m, "k") != 1 {
				return false
			}
		}
		return holderOf(lm, "k") != 0
	}, "every replica has the session's grant and wait")
	owner := holderOf(lm, "k")

	c.Crash(li)
	var b *client
	testutil.Eventually(t, 30*time.Second, func() bool {
		ni := c.Leader(servertest.LeaderTimeout)
		if ni == li {
			return false
		}
		b = dial(t, c.Members()[ni].Addr)
		greet(t, b)
		return tdo(t, b, "s", "session", sid, "") == "ok "+sid+" 20"
	}, "the session attached on the new leader")
	if got := tdo(t, b, "3", "r "+sid, "k", tok); got != "ok" {
		t.Fatalf("release on the new leader = %q", got)
	}
	nm := c.Members()[c.Leader(servertest.LeaderTimeout)]
	testutil.Eventually(t, 10*time.Second, func() bool { return holderOf(nm, "k") == owner && waitersOn(nm, "k") == 0 },
		"the session's wait granted to it")
	if got := tdo(t, b, "4", "session", sid, "close"); got != "ok" {
		t.Fatalf("close = %q", got)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return holderOf(nm, "k") == 0 }, "closed: released")
}
