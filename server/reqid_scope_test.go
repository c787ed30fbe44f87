package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// TestClusterRequestIDsPerSession: request ids are the session's own. Two
// sessions that send the same id (plain, tagged, and ml) each get their
// own answer, never the other's grant; a connection without a session
// shares none of theirs; and a session's retry from a new connection
// still gets its first answer.
func TestClusterRequestIDsPerSession(t *testing.T) {
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		ServerEdit: func(cfg *server.Config) { cfg.OrphanTTL = 20 * time.Second }})
	lm := c.Members()[c.Leader(servertest.LeaderTimeout)]

	a, b, o := dial(t, lm.Addr), dial(t, lm.Addr), dial(t, lm.Addr)
	aid := openSession(t, a, "20")
	openSession(t, b, "20")
	openSession(t, o, "20")
	tokA := grant(t, a.do("l", "k @same", "0 60"), "ok")
	if got := o.do("l", "k @same", "0 60"); got != "timeout" {
		t.Fatalf("another session's l with a's id = %q; want timeout (k is a's)", got)
	}
	if got := dial(t, lm.Addr).do("l", "k @same", "0 60"); got != "timeout" {
		t.Fatalf("l with a's id and no session = %q; want timeout", got)
	}
	b.req("l", "k @same", "60 60") // b waits with the id, behind a
	testutil.Eventually(t, 10*time.Second, func() bool { return waitersOn(lm, "k") == 1 }, "b queued")
	// a's retry, from a new connection of its session, is answered as
	// the first was.
	a2 := dial(t, lm.Addr)
	if got := a2.do("session", aid, ""); got != "ok "+aid+" 20" {
		t.Fatalf("session %s = %q", aid, got)
	}
	if got := grant(t, a2.do("l", "k @same", "0 60"), "ok"); got != tokA {
		t.Fatalf("a's retry = %s; want its first token %s", got, tokA)
	}
	if got := a2.do("r", "k", tokA); got != "ok" {
		t.Fatalf("a's release = %q", got)
	}
	if tokB := grant(t, b.line(), "ok"); tokB == tokA {
		t.Fatalf("b got a's token %s", tokB)
	}

	// Sets: b's ml with a's id is b's own.
	grants(t, a2.do("ml", "s1 s2 @set", "0 60"), 2)
	if got := o.do("ml", "s1 s2 @set", "0 60"); got != "timeout" {
		t.Fatalf("b's ml with a's id = %q; want timeout", got)
	}
	grants(t, b.do("ml", "s3 s4 @set", "0 60"), 2)

	// Tagged: two sessions on one connection, one id.
	tc := dial(t, lm.Addr)
	greet(t, tc)
	sid := func(tag string) string {
		f := strings.Fields(tdo(t, tc, tag, "session", "_", ""))
		if len(f) != 3 || f[0] != "ok" {
			t.Fatalf("session _ = %q", f)
		}
		return f[1]
	}
	s1, s2 := sid("o1"), sid("o2")
	t1 := grant(t, tdo(t, tc, "1", "l "+s1, "t @tid", "0 60"), "ok")
	tc.req("#2 l "+s2, "t @tid", "60 60") // s2 waits with s1's id, behind s1
	testutil.Eventually(t, 10*time.Second, func() bool { return waitersOn(lm, "t") == 1 }, "s2 queued")
	tc.req("#3 r "+s1, "t", t1)
	got := answers(t, tc, 2)
	if got["3"] != "ok" {
		t.Fatalf("s1's release = %q", got["3"])
	}
	if t2 := grant(t, got["2"], "ok"); t2 == t1 {
		t.Fatalf("s2 got s1's token %s", t2)
	}
}
