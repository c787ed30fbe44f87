package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// TestTaggedMultiOutOfOrder: a tagged ml that waits holds back nothing:
// a later single-key request on the same connection is answered first,
// and the set is answered with its tag, all keys at once, when its last
// busy key is released. A single l behind the waiting set stays behind it
// (FIFO per key). The set's keys are released one by one with r.
func TestTaggedMultiOutOfOrder(t *testing.T) {
	s := servertest.StartServer(t)
	a, c, d := dial(t, s.Addr), dial(t, s.Addr), dial(t, s.Addr)
	greet(t, c)
	tb := grant(t, a.do("l", "b", "0"), "ok")
	if got := tdo(t, c, "0", "ml", "a b", "0"); got != "timeout" {
		t.Fatalf("try of a busy set = %q; want timeout", got)
	}
	c.req("#set ml", "a b", "10 30")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "a") == 1 }, "set queued on a")
	tk := grant(t, tdo(t, c, "1", "l", "k", "0"), "ok") // behind the waiting set, answered first
	d.req("l", "a", "10")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "a") == 2 }, "single behind the set")
	if got := a.do("r", "b", tb); got != "ok" {
		t.Fatal(got)
	}
	toks := grants(t, answers(t, c, 1)["set"], 2)
	d.silent(50 * time.Millisecond)
	if got := tdo(t, c, "2", "r", "a", toks[0]); got != "ok" {
		t.Fatalf("release a = %q", got)
	}
	grant(t, d.line(), "ok")
	got := make(map[string]string)
	c.req("#3 r", "b", toks[1])
	c.req("#4 r", "k", tk)
	for tag, ans := range answers(t, c, 2) {
		got[tag] = ans
	}
	if got["3"] != "ok" || got["4"] != "ok" {
		t.Fatalf("releases = %v; want ok ok", got)
	}
}

// TestTaggedMultiTimeoutAndErrors: a tagged set that times out answers
// "#<tag> timeout" and leaves every queue; msl takes a slot of each
// semaphore; a repeated key or a bad argument fails alone; the request id
// rides after the keys as in the plain form.
func TestTaggedMultiTimeoutAndErrors(t *testing.T) {
	s := servertest.StartServer(t)
	a, c := dial(t, s.Addr), dial(t, s.Addr)
	greet(t, c)
	grant(t, a.do("l", "y", "0"), "ok")
	c.req("#t ml", "x y", "1")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "x") == 1 }, "set queued")
	grants(t, tdo(t, c, "s", "msl", "s1 s2 @3f9a1c0e5d7b2a48.1k", "0 2 30"), 2)
	if got := answers(t, c, 1)["t"]; got != "timeout" {
		t.Fatalf("set = %q; want timeout", got)
	}
	if waiters(s, "x") != 0 || waiters(s, "y") != 0 || holder(s.Engine, "x") != 0 {
		t.Fatal("a timed-out set left a queue entry or a hold")
	}
	for _, bad := range [][2]string{{"x x", "0"}, {"x y", "z"}} {
		if got := tdo(t, c, "e", "ml", bad[0], bad[1]); got != "error" {
			t.Fatalf("ml %q %q = %q; want error", bad[0], bad[1], got)
		}
	}
	grants(t, tdo(t, c, "z", "ml", "x z", "0"), 2) // still open
}

// TestTaggedMultiDisconnect: a tagged connection's sets, held and
// waiting, go when it closes.
func TestTaggedMultiDisconnect(t *testing.T) {
	s := servertest.StartServer(t)
	a, c := dial(t, s.Addr), dial(t, s.Addr)
	greet(t, c)
	grants(t, tdo(t, c, "1", "ml", "p q", "0 60"), 2)
	grant(t, a.do("l", "w", "0"), "ok")
	c.req("#2 ml", "v w", "60")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "v") == 1 }, "set queued")
	_ = c.c.Close()
	testutil.Eventually(t, 5*time.Second, func() bool {
		return holder(s.Engine, "p") == 0 && holder(s.Engine, "q") == 0 && waiters(s, "v") == 0 && waiters(s, "w") == 0
	}, "closing releases the held set and withdraws the waiting one")
}

// TestTaggedMultiSession: a set naming a session is the session's: it
// outlives the connection, another connection attaches the session and
// releases its keys by token; closing the session from another connection
// under a waiting set answers that set "#<tag> error" alone.
func TestTaggedMultiSession(t *testing.T) {
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) { c.OrphanTTL = 10 * time.Second })
	c, o := dial(t, s.Addr), dial(t, s.Addr)
	greet(t, c)
	greet(t, o)
	f := strings.Fields(tdo(t, c, "s", "session", "_", ""))
	if len(f) != 3 || f[0] != "ok" {
		t.Fatalf("session _ = %q", f)
	}
	sid := f[1]
	toks := grants(t, tdo(t, c, "1", "ml "+sid, "a b", "0 60"), 2)
	if holder(s.Engine, "a") == holder(s.Engine, "c") || holder(s.Engine, "a") != holder(s.Engine, "b") {
		t.Fatal("the set is not the session's")
	}
	_ = c.c.Close()
	d := dial(t, s.Addr)
	greet(t, d)
	if got := tdo(t, d, "x", "ml "+sid, "m n", "0"); got != "error" {
		t.Fatalf("a set for a session not attached = %q; want error", got)
	}
	if got := tdo(t, d, "2", "session", sid, ""); !strings.HasPrefix(got, "ok "+sid) {
		t.Fatalf("attach = %q", got)
	}
	if holder(s.Engine, "a") == 0 || holder(s.Engine, "b") == 0 {
		t.Fatal("the session's set did not outlive the connection")
	}
	if got := tdo(t, d, "3", "r "+sid, "a", toks[0]); got != "ok" {
		t.Fatalf("release through another connection = %q", got)
	}
	grant(t, tdo(t, o, "h", "l", "a", "0"), "ok")
	d.req("#w ml "+sid, "a b", "60")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "a") == 1 }, "the session's set queued")
	if got := tdo(t, o, "c", "session", sid, "close"); got != "ok" {
		t.Fatalf("close from another connection = %q", got)
	}
	if got := answers(t, d, 1)["w"]; got != "error" {
		t.Fatalf("the withdrawn set = %q; want error", got)
	}
	if holder(s.Engine, "b") != 0 || waiters(s, "a") != 0 {
		t.Fatal("the closed session kept b or its wait")
	}
	grant(t, tdo(t, d, "4", "l", "k", "0"), "ok") // d is still open
}
