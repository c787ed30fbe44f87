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

// TestTaggedCancel: a tagged cancel withdraws the connection's parked l
// from the key's queue at once: the cancel answers "ok", the withdrawn
// request "timeout", and the connection stays open. The next waiter is
// granted on the holder's release, and the withdrawn one hears nothing
// more. A cancel with nothing waiting answers error_not_enqueued; a
// grant that won the race stays the client's.
func TestTaggedCancel(t *testing.T) {
	s := servertest.StartServer(t)
	h, a, b, tok := holdAndQueue(t, s.Addr, func(n int) bool { return waiters(s, "k") == n })
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "k") == 2 }, "b queued")
	withdraw(t, a, "c", "k", "", "a1")
	if n := waiters(s, "k"); n != 1 {
		t.Fatalf("waiters after the cancel = %d; want 1", n)
	}
	if got := h.do("r", "k", tok); got != "ok" {
		t.Fatal(got)
	}
	tb := grant(t, answers(t, b, 1)["b1"], "ok")
	// a is open and hears nothing of k: its next answer is the probe's.
	if got := tdo(t, a, "p", "l", "k2", "0"); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("probe = %q", got)
	}
	if got := tdo(t, a, "c2", "cancel", "k", ""); got != "error_not_enqueued" {
		t.Fatalf("cancel with nothing waiting = %q; want error_not_enqueued", got)
	}
	a.req("#a2 l", "k", "60")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "k") == 1 }, "a queued again")
	if got := tdo(t, b, "r", "r", "k", tb); got != "ok" {
		t.Fatal(got)
	}
	ta := grant(t, answers(t, a, 1)["a2"], "ok")
	if got := tdo(t, a, "c3", "cancel", "k", ""); got != "error_not_enqueued" {
		t.Fatalf("cancel after the grant = %q; want error_not_enqueued", got)
	}
	if got := tdo(t, a, "r", "r", "k", ta); got != "ok" {
		t.Fatalf("the grant that won the race: release = %q", got)
	}
	if got := tdo(t, a, "e", "cancel", "k", "all"); got != "error" {
		t.Fatalf("cancel with a bad argument = %q; want error", got)
	}
}

// TestTaggedCancelSet: "cancel" with the argument "set" withdraws the
// waiting ml whose first key it names, from every key's queue.
func TestTaggedCancelSet(t *testing.T) {
	s := servertest.StartServer(t)
	h, a := dial(t, s.Addr), dial(t, s.Addr)
	greet(t, a)
	tok := grant(t, h.do("l", "y", "0"), "ok")
	a.req("#m ml", "x y", "60 30")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "y") == 1 }, "set queued")
	if got := tdo(t, a, "c0", "cancel", "y", "set"); got != "error_not_enqueued" {
		t.Fatalf("cancel naming the set's second key = %q; want error_not_enqueued", got)
	}
	if got := tdo(t, a, "c1", "cancel", "x", ""); got != "error_not_enqueued" {
		t.Fatalf("single-key cancel of a set = %q; want error_not_enqueued", got)
	}
	withdraw(t, a, "c", "x", "set", "m")
	if waiters(s, "x") != 0 || waiters(s, "y") != 0 || holder(s.Engine, "x") != 0 {
		t.Fatal("a withdrawn set left a queue entry or a hold")
	}
	if got := h.do("r", "y", tok); got != "ok" {
		t.Fatal(got)
	}
	if got := tdo(t, a, "p", "l", "y", "0"); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("y after the set's cancel = %q; want a grant to the probe", got)
	}
}

// holdAndQueue dials a holder h of the key k and two tagged connections a
// and b, whose l's on k (tags a1 and b1) queue behind it in that order;
// queued(n) reports whether k's queue is n long.
func holdAndQueue(t *testing.T, addr string, queued func(int) bool) (h, a, b *client, tok string) {
	t.Helper()
	h, a, b = dial(t, addr), dial(t, addr), dial(t, addr)
	greet(t, a)
	greet(t, b)
	tok = grant(t, h.do("l", "k", "0"), "ok")
	a.req("#a1 l", "k", "60")
	testutil.Eventually(t, 10*time.Second, func() bool { return queued(1) }, "a queued")
	b.req("#b1 l", "k", "60")
	return h, a, b, tok
}

// withdraw sends "#<tag> cancel" for key and arg on c, and checks that it
// answers ok and the request withdrawn, wtag, timeout.
func withdraw(t *testing.T, c *client, tag, key, arg, wtag string) {
	t.Helper()
	c.req("#"+tag+" cancel", key, arg)
	if got := answers(t, c, 2); got[tag] != "ok" || got[wtag] != "timeout" {
		t.Fatalf("cancel answers = %v; want %s: ok, %s: timeout", got, tag, wtag)
	}
}

// TestTaggedCancelSession: a cancel naming a session withdraws the
// session's wait, even one parked through another connection the session
// is attached to: that request answers "timeout" there, and its
// connection stays open. A cancel naming a session not attached fails.
func TestTaggedCancelSession(t *testing.T) {
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) { c.OrphanTTL = 10 * time.Second })
	h, a, b := dial(t, s.Addr), dial(t, s.Addr), dial(t, s.Addr)
	greet(t, a)
	greet(t, b)
	f := strings.Fields(tdo(t, a, "s", "session", "_", ""))
	if len(f) != 3 || f[0] != "ok" {
		t.Fatalf("session _ = %q", f)
	}
	sid := f[1]
	if got := tdo(t, b, "c0", "cancel "+sid, "k", ""); got != "error" {
		t.Fatalf("cancel for a session not attached = %q; want error", got)
	}
	if got := tdo(t, b, "s", "session", sid, ""); !strings.HasPrefix(got, "ok "+sid) {
		t.Fatalf("attach = %q", got)
	}
	tok := grant(t, h.do("l", "k", "0"), "ok")
	a.req("#w l "+sid, "k", "60")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "k") == 1 }, "the session's wait queued")
	if got := tdo(t, b, "c1", "cancel "+sid, "k", ""); got != "ok" {
		t.Fatalf("cancel from the other connection = %q; want ok", got)
	}
	if got := answers(t, a, 1)["w"]; got != "timeout" {
		t.Fatalf("the withdrawn wait = %q; want timeout", got)
	}
	if got := h.do("r", "k", tok); got != "ok" {
		t.Fatal(got)
	}
	grant(t, tdo(t, a, "p", "l "+sid, "k", "0"), "ok") // a is open; k is free
}

// TestCancelPlainUnknown: on a plain connection cancel is an unknown
// command, as it is to dflockd: "error", and the connection closes.
func TestCancelPlainUnknown(t *testing.T) {
	s := servertest.StartServer(t)
	c := dial(t, s.Addr)
	if got := c.do("cancel", "k", ""); got != "error" {
		t.Fatalf("plain cancel = %q; want error", got)
	}
	c.closed()
}
