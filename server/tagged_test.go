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

// greet sends the tagged greeting on c.
func greet(t *testing.T, c *client) {
	t.Helper()
	if got := c.do("tagged", "1", ""); got != "ok" {
		t.Fatalf("greeting = %q; want ok", got)
	}
}

// answers reads n tagged answers and returns them by tag.
func answers(t *testing.T, c *client, n int) map[string]string {
	t.Helper()
	got := make(map[string]string, n)
	for range n {
		line := c.line()
		tag, rest, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(tag, "#") {
			t.Fatalf("untagged answer %q", line)
		}
		got[tag[1:]] = rest
	}
	return got
}

// tdo sends one tagged request and reads its answer, checking the tag.
func tdo(t *testing.T, c *client, tag, cmd, key, arg string) string {
	t.Helper()
	c.req("#"+tag+" "+cmd, key, arg)
	return answers(t, c, 1)[tag]
}

// holder returns the owner holding key, 0 for none.
func holder(e *engine.Engine, key string) engine.OwnerID {
	st := e.Snapshot(0)
	for _, l := range st.Locks {
		if l.Key == key {
			return engine.OwnerID(l.OwnerConnID)
		}
	}
	for _, m := range st.Semaphores {
		if m.Key == key && m.Holders > 0 {
			return 1
		}
	}
	return 0
}

// TestTaggedOutOfOrder: in tagged mode a waiting l holds back nothing:
// later requests are answered first, each with its tag, and the grant
// comes with the l's tag when the holder releases. An invalid request
// fails alone; a request without a tag closes the connection.
func TestTaggedOutOfOrder(t *testing.T) {
	s := servertest.StartServer(t)
	c := dial(t, s.Addr)
	greet(t, c)
	tok := grant(t, tdo(t, c, "1", "l", "k", "10"), "ok")
	c.req("#2 l", "k", "10")   // waits behind #1
	c.req("#a.3 l", "k2", "0") // answered at once, before #2
	tok3 := grant(t, answers(t, c, 1)["a.3"], "ok")
	c.req("#4 r", "k", tok)
	got := answers(t, c, 2)
	if got["4"] != "ok" {
		t.Fatalf("release = %q; want ok", got["4"])
	}
	grant(t, got["2"], "ok")
	if got := tdo(t, c, "5", "l", "k", "x"); got != "error" {
		t.Fatalf("invalid request = %q; want error", got)
	}
	if got := tdo(t, c, "6", "r", "k2", tok3); got != "ok" {
		t.Fatalf("release after an invalid request = %q; want ok", got)
	}
	if got := tdo(t, c, "7", "stats", "_", ""); !strings.HasPrefix(got, "ok {") {
		t.Fatalf("stats = %q; want ok <json>", got)
	}
	if got := tdo(t, c, "10", "watch", "k", ""); got != "error" {
		t.Fatalf("watch in tagged mode = %q; want error", got)
	}
	if got := tdo(t, c, "8", "tagged", "1", ""); got != "error" {
		t.Fatalf("second greeting = %q; want error", got)
	}
	if got := c.do("l", "k", "0"); got != "error" {
		t.Fatalf("untagged request = %q; want error", got)
	}
	c.closed()
}

// TestTaggedSessions: a tagged connection attaches several sessions, each
// request acting for the one it names; what a session holds outlives the
// connection, another connection attaches it and releases by token; a
// closed session releases what it holds; one left alone ends after the
// orphan TTL; a request naming a session not attached is refused.
func TestTaggedSessions(t *testing.T) {
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) { c.OrphanTTL = time.Second })
	c := dial(t, s.Addr)
	greet(t, c)
	sid := func(tag string) string {
		f := strings.Fields(tdo(t, c, tag, "session", "_", ""))
		if len(f) != 3 || f[0] != "ok" || len(f[1]) != 32 || f[2] != "1" {
			t.Fatalf("session _ = %q", f)
		}
		return f[1]
	}
	a, b := sid("s1"), sid("s2")
	if got := tdo(t, c, "k", "session", a, ""); got != "ok "+a+" 1" {
		t.Fatalf("keepalive = %q", got)
	}
	tokA := grant(t, tdo(t, c, "1", "l "+a, "ka", "0 60"), "ok")
	grant(t, tdo(t, c, "2", "l "+b, "kb", "0 60"), "ok")
	if holder(s.Engine, "ka") == holder(s.Engine, "kb") || holder(s.Engine, "ka") == 0 {
		t.Fatal("two sessions, one owner")
	}
	c.req("#3 l "+b, "ka", "60") // b waits behind a on one connection
	_ = c.c.Close()

	d := dial(t, s.Addr)
	greet(t, d)
	if got := tdo(t, d, "0", "l "+a, "x", "0"); got != "error" {
		t.Fatalf("request for a session not attached = %q; want error", got)
	}
	if got := tdo(t, d, "1", "session", a, ""); got != "ok "+a+" 1" {
		t.Fatalf("attach = %q", got)
	}
	if got := tdo(t, d, "2", "r "+a, "ka", tokA); got != "ok" {
		t.Fatalf("release through another connection = %q", got)
	}
	// b's wait was granted while no connection had b: b holds ka.
	testutil.Eventually(t, 5*time.Second, func() bool { return holder(s.Engine, "ka") == holder(s.Engine, "kb") },
		"b's queued l granted unheard")
	if got := tdo(t, d, "3", "session", a, "close"); got != "ok" {
		t.Fatalf("close = %q", got)
	}
	// Nobody attaches b: after the orphan TTL what it holds goes.
	testutil.Eventually(t, 10*time.Second, func() bool { return holder(s.Engine, "ka") == 0 && holder(s.Engine, "kb") == 0 },
		"the orphan TTL releases b")
	if got := tdo(t, d, "4", "session", b, ""); got != "error" {
		t.Fatalf("attach an ended session = %q; want error", got)
	}
}

// TestTaggedConnectionOwner: a tagged request naming no session acts for
// the connection, which releases what it holds when it closes.
func TestTaggedConnectionOwner(t *testing.T) {
	s := servertest.StartServer(t)
	c := dial(t, s.Addr)
	greet(t, c)
	grant(t, tdo(t, c, "1", "sl", "sem", "0 2 60"), "ok")
	grant(t, tdo(t, c, "2", "sl", "sem", "0 2 60"), "ok")
	if got := tdo(t, c, "3", "sl", "sem", "0 2 60"); got != "timeout" {
		t.Fatalf("third slot = %q; want timeout", got)
	}
	_ = c.c.Close()
	testutil.Eventually(t, 5*time.Second, func() bool { return holder(s.Engine, "sem") == 0 }, "released at close")
}

// TestTaggedSessionClosedUnderWait: a session closed from another
// connection withdraws its waits; each fails alone ("#<tag> error") and
// the connection that sent them stays open.
func TestTaggedSessionClosedUnderWait(t *testing.T) {
	s := servertest.StartServer(t)
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	greet(t, a)
	greet(t, b)
	f := strings.Fields(tdo(t, a, "s", "session", "_", ""))
	if len(f) != 3 || f[0] != "ok" {
		t.Fatalf("session _ = %q", f)
	}
	sid := f[1]
	grant(t, tdo(t, b, "1", "l", "k", "0"), "ok") // b holds k for itself
	a.req("#w l "+sid, "k", "60")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "k") == 1 }, "a's wait queued")
	if got := tdo(t, b, "2", "session", sid, "close"); got != "ok" {
		t.Fatalf("close from another connection = %q", got)
	}
	if got := answers(t, a, 1)["w"]; got != "error" {
		t.Fatalf("the withdrawn wait = %q; want error", got)
	}
	grant(t, tdo(t, a, "3", "l", "k2", "0"), "ok") // a is still open
}
