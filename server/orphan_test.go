package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// openSession sends "session _" and returns the session id.
func openSession(t *testing.T, c *client, ttl string) string {
	t.Helper()
	f := strings.Fields(c.do("session", "_", ""))
	if len(f) != 3 || f[0] != "ok" || len(f[1]) != 32 || f[2] != ttl {
		t.Fatalf("session _ = %q; want ok <32 hex> %s", f, ttl)
	}
	return f[1]
}

// holderOf returns the owner holding key on m's replica, 0 for none.
func holderOf(m *servertest.Member, key string) engine.OwnerID {
	for _, l := range m.Node.FSM().Engine().Snapshot(0).Locks {
		if l.Key == key {
			return engine.OwnerID(l.OwnerConnID)
		}
	}
	return 0
}

// TestOrphanTTL: a connection acting for a session leaves what it held and
// waited for in place when it closes; a new connection naming the session
// takes it back (a waiter its place, through its request id); after the
// orphan TTL what a session left is released through the log. A
// connection with no session is released at once, as before.
func TestOrphanTTL(t *testing.T) {
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		ServerEdit: func(cfg *server.Config) { cfg.OrphanTTL = 2 * time.Second }})
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	lm := ms[li]

	a := dial(t, lm.Addr)
	aid := openSession(t, a, "2")
	tok := grant(t, a.do("l", "k @a.1", "0 60"), "ok")
	w := dial(t, lm.Addr)
	wid := openSession(t, w, "2")
	w.req("l", "k @w.1", "60 60")
	x := dial(t, lm.Addr) // no session: a dflockd client
	testutil.Eventually(t, 10*time.Second, func() bool { return waitersOn(lm, "k") == 1 }, "w queued")
	x.req("l", "k", "60 60")
	testutil.Eventually(t, 10*time.Second, func() bool { return waitersOn(lm, "k") == 2 }, "x queued")

	// Only a connection's first request may name a session; a forged id
	// is refused.
	if got := a.do("session", "_", ""); got != "error" {
		t.Fatalf("session after a request = %q; want error", got)
	}
	if got := dial(t, lm.Addr).do("session", aid[:16]+strings.Repeat("0", 15)+"1", ""); got != "error" {
		t.Fatalf("session with a forged key = %q; want error", got)
	}

	// a and w drop; their grant and place stay.
	_ = a.c.Close()
	_ = w.c.Close()
	w2 := dial(t, lm.Addr)
	if got := w2.do("session", wid, ""); got != "ok "+wid+" 2" {
		t.Fatalf("session %s = %q; want it back", wid, got)
	}
	w2.req("l", "k @w.1", "60 60") // the retry takes the place back
	a2 := dial(t, lm.Addr)
	if got := a2.do("session", aid, ""); got != "ok "+aid+" 2" {
		t.Fatalf("session %s = %q; want it back", aid, got)
	}
	if got := a2.do("session", aid, ""); got != "ok "+aid+" 2" {
		t.Fatalf("keepalive = %q; want ok", got)
	}
	if got := a2.do("r", "k", tok); got != "ok" {
		t.Fatalf("release by the returning holder = %q", got)
	}
	wtok := grant(t, w2.line(), "ok") // w, queued before x, comes first
	x.silent(100 * time.Millisecond)

	// w2 drops holding k and never comes back: after the orphan TTL the
	// lease is released through the log and x gets it, on every replica.
	_ = w2.c.Close()
	xtok := grant(t, x.line(), "ok")
	if xtok == wtok {
		t.Fatalf("x got w's token %s", xtok)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		owner := holderOf(lm, "k")
		for _, m := range c.Members() {
			if holderOf(m, "k") != owner || owner == 0 {
				return false
			}
		}
		return true
	}, "every replica holds k for x")
	// x, without a session, is released at once when it closes.
	_ = x.c.Close()
	testutil.Eventually(t, 10*time.Second, func() bool { return holderOf(lm, "k") == 0 }, "x's lock released")
}

// waitersOn returns key's queue length on m's replica, -1 without the key.
func waitersOn(m *servertest.Member, key string) int {
	for _, l := range m.Node.FSM().Engine().Snapshot(0).Locks {
		if l.Key == key {
			return l.Waiters
		}
	}
	return -1
}

// TestSessionKeepaliveAfterRegainedLeadership: a new leader's restamp makes
// every session idle, so a connection on a node that lost the leadership
// and won it back would see its session expire under it; its keepalive
// begins the session anew, and what it holds stays.
func TestSessionKeepaliveAfterRegainedLeadership(t *testing.T) {
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		ServerEdit: func(cfg *server.Config) { cfg.OrphanTTL = 20 * time.Second }})
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	a := dial(t, ms[li].Addr)
	id := openSession(t, a, "20")
	grant(t, a.do("l", "kept @1", "0 120"), "ok")
	owner := holderOf(ms[li], "kept")
	other := ms[(li+1)%3]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, to := range []*servertest.Member{other, ms[li]} {
		if err := ms[li].Node.TransferLeadership(ctx, to.ID); err != nil {
			// The transfer is asked of whichever node leads now.
			if err := other.Node.TransferLeadership(ctx, to.ID); err != nil {
				t.Fatalf("TransferLeadership(%s): %v", to.ID, err)
			}
		}
		if got := c.Members()[c.Leader(servertest.LeaderTimeout)]; got != to {
			t.Fatalf("leader %s; want %s", got.ID, to.ID)
		}
	}
	if busy, ok := ms[li].Node.FSM().Engine().SessionBusy(owner); !ok || busy != 0 {
		t.Fatalf("session after the restamps: busy %d, open %v; want idle and open", busy, ok)
	}
	if got := a.do("session", id, ""); got != "ok "+id+" 20" {
		t.Fatalf("keepalive = %q; want ok", got)
	}
	if busy, ok := ms[li].Node.FSM().Engine().SessionBusy(owner); !ok || busy != 1 {
		t.Fatalf("session after the keepalive: busy %d, open %v; want busy", busy, ok)
	}
	if holderOf(ms[li], "kept") != owner {
		t.Fatal("the session's lock is gone")
	}
}
