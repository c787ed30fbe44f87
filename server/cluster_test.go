package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// fenceOf returns the fence number of a grant line's token.
func fenceOf(t testing.TB, line, word string) uint64 {
	t.Helper()
	tok, err := fence.ParseString(grant(t, line, word))
	if err != nil {
		t.Fatal(err)
	}
	return tok.Fence
}

func TestClusterLeaderGrantsFollowerRedirects(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	leader := dial(t, ms[li].Addr)
	follower := dial(t, ms[(li+1)%3].Addr)

	tok := grant(t, leader.do("l", "job", "0 30"), "ok")
	// Every mutating command on a follower names the leader's client
	// address; nothing is applied there.
	for _, r := range [][3]string{{"l", "job", "0"}, {"r", "job", tok}, {"n", "job", tok}, {"e", "k2", ""},
		{"w", "k2", "0"}, {"sl", "s", "0 2"}, {"sr", "s", tok}} {
		if got, want := follower.do(r[0], r[1], r[2]), "error_not_leader "+ms[li].Addr; got != want {
			t.Fatalf("follower %s: got %q, want %q", r[0], got, want)
		}
	}
	// Stats answer on a follower, from its replica of the state.
	testutil.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(follower.do("stats", "_", ""), `"job"`)
	}, "follower stats never showed the lock")
	if st := follower.do("stats", "_", ""); !strings.Contains(st, `"role":"follower"`) ||
		!strings.Contains(st, `"leader_client_addr":"`+ms[li].Addr+`"`) {
		t.Fatalf("follower stats lack the cluster state: %s", st)
	}

	// The leader's queue works through the log: a waiter gets the lock
	// when the holder releases it.
	waiter := dial(t, ms[li].Addr)
	waiter.req("l", "job", "5 30")
	waiter.silent(100 * time.Millisecond)
	if got := leader.do("r", "job", tok); got != "ok" {
		t.Fatalf("release: %q", got)
	}
	first := fenceOf(t, tok2line(tok), "ok")
	if f := fenceOf(t, waiter.line(), "ok"); f <= first {
		t.Fatalf("waiter's fence %d not above the first grant's %d", f, first)
	}
	// A closed connection's lock is released through the log.
	_ = waiter.c.Close()
	other := dial(t, ms[li].Addr)
	grant(t, other.do("l", "job", "5 30"), "ok")

	// dflockd's two-phase error words come through the log as well.
	tp := dial(t, ms[li].Addr)
	if got := tp.do("w", "tp", "0"); got != "error_not_enqueued" {
		t.Fatalf("w without e: %q", got)
	}
	grant(t, tp.do("e", "tp", "1"), "acquired")
	if got := tp.do("e", "tp", ""); got != "error_already_enqueued" {
		t.Fatalf("second e: %q", got)
	}
	eng := ms[li].Node.FSM().Engine()
	testutil.Eventually(t, 30*time.Second, func() bool {
		for _, l := range eng.Snapshot(0).Locks {
			if l.Key == "tp" {
				return false
			}
		}
		return true
	}, "the enqueued grant's lease never expired")
	if got := tp.do("w", "tp", "0"); got != "error_lease_expired" {
		t.Fatalf("w after the lease ran out: %q", got)
	}
}

// tok2line makes a grant line of a bare token, to reuse fenceOf.
func tok2line(tok string) string { return "ok " + tok + " 30" }

func TestClusterFailoverKeepsLeases(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	holder := dial(t, ms[li].Addr)
	line := holder.do("l", "pay", "0 30")
	tok := grant(t, line, "ok")
	before := fenceOf(t, line, "ok")
	// Let the grant reach every follower's log before the leader dies.
	testutil.Eventually(t, 30*time.Second, func() bool {
		for i, m := range c.Members() {
			if i != li && m.Node.FSM().AppliedIndex() < ms[li].Node.FSM().AppliedIndex() {
				return false
			}
		}
		return true
	}, "followers did not catch up")

	killed := time.Now()
	c.Stop(li)
	nl := c.Leader(servertest.LeaderTimeout)
	took := time.Since(killed)
	// Timing is reported, not asserted: make chaos measures failover.
	t.Logf("new leader %s ready %v after the old one stopped", ms[nl].ID, took)
	grantSurvived(t, dial(t, ms[nl].Addr), "pay", tok, before)
	// The old leader comes back as a follower and catches up.
	c.Restart(li)
	testutil.Eventually(t, 30*time.Second, func() bool {
		m := c.Members()[li]
		return m.Node.FSM().AppliedIndex() >= ms[nl].Node.FSM().AppliedIndex()
	}, "restarted node did not catch up")
	back := dial(t, ms[li].Addr)
	if got := back.do("l", "x", "0"); got != "error_not_leader "+ms[nl].Addr {
		t.Fatalf("restarted old leader answered %q", got)
	}
}

func TestClusterRestartFromDisk(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	cl := dial(t, ms[li].Addr)
	line := cl.do("l", "migrate", "0 600")
	tok := grant(t, line, "ok")
	before := fenceOf(t, line, "ok")
	grant(t, cl.do("sl", "pool", "0 3 600"), "ok")
	// Every member stops (a stopping server keeps its clients' grants for
	// the next leader); the grants are in every member's log.
	for i := range ms {
		c.Stop(i)
	}
	for i := range ms {
		c.Restart(i)
	}
	nl := c.Leader(servertest.LeaderTimeout)
	grantSurvived(t, dial(t, c.Members()[nl].Addr), "migrate", tok, before)
}

// grantSurvived checks, through a connection to the current leader, that
// the lock on key granted with tok (fence before) is still held, that tok
// renews and releases it, and that the next grant's fence is higher.
func grantSurvived(t *testing.T, cl *client, key, tok string, before uint64) {
	t.Helper()
	if got := cl.do("l", key, "0 600"); got != "timeout" {
		t.Fatalf("try-lock %s: %q, want timeout (the lock kept)", key, got)
	}
	if got := cl.do("n", key, tok+" 600"); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("renew %s with the old token: %q", key, got)
	}
	if got := cl.do("r", key, tok); got != "ok" {
		t.Fatalf("release %s with the old token: %q", key, got)
	}
	if after := fenceOf(t, cl.do("l", key, "0 600"), "ok"); after <= before {
		t.Fatalf("fence on %s now %d, not above %d", key, after, before)
	}
}

// TestClusterStopWithdrawsWaits: a leader that stops leaves its
// connections' grants to be renewed on the next leader, but withdraws their
// waits: nobody can resume them (w needs the owner), and left queued each
// would be granted in turn and held unheard for a lease.
func TestClusterStopWithdrawsWaits(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	holder := dial(t, ms[li].Addr)
	tok := grant(t, holder.do("l", "job", "0 30"), "ok")
	waiter := dial(t, ms[li].Addr)
	waiter.req("l", "job", "60 30")
	testutil.Eventually(t, 30*time.Second, func() bool {
		_, g := ms[li].Node.FSM().Engine().Metrics()
		return g.Waiting == 1
	}, "the waiter never queued")

	c.Stop(li)
	nl := c.Leader(servertest.LeaderTimeout)
	_, g := ms[nl].Node.FSM().Engine().Metrics()
	if g.Held != 1 || g.Waiting != 0 {
		t.Fatalf("on the new leader held %d waiting %d; want the grant kept (1) and the wait withdrawn (0)", g.Held, g.Waiting)
	}
	// The holder's grant is still its own, by token.
	if got := dial(t, ms[nl].Addr).do("n", "job", tok); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("renew on the new leader = %q", got)
	}
}

// TestClusterBatchWaitKnowsReleasers: a client that locks and unlocks in
// turn is waited for after each answer, and its unlock (a release, which
// carries no owner) is recognised as its return, so the leader's batch
// waits fill rather than run to their deadline. Without the connection
// named on every command (replica.Command.Client), each wait after a
// lock timed out and the leader soon stopped waiting.
func TestClusterBatchWaitKnowsReleasers(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	leader := dial(t, ms[li].Addr)
	node := ms[li].Node
	before := node.Status()
	const rounds = 30
	for range rounds {
		tok := grant(t, leader.do("l", "bw", "0 30"), "ok")
		if got := leader.do("r", "bw", tok); got != "ok" {
			t.Fatalf("release: %q", got)
		}
	}
	st := node.Status()
	waits, timeouts := st.BatchWaits-before.BatchWaits, st.BatchWaitTimeouts-before.BatchWaitTimeouts
	t.Logf("%d lock+unlock: %d waits, %d timed out", rounds, waits, timeouts)
	// A wait fills when the answered client is back before its deadline.
	// A leader that did not know its releasers would time out every wait;
	// one that does fills most, and a loaded machine that stalls the test
	// client past a deadline costs only some of them.
	if filled := waits - timeouts; waits < rounds || filled*4 < rounds {
		t.Fatalf("%d waits, %d timed out for %d lock+unlock; want a wait after most answers, at least a quarter filled", waits, timeouts, rounds)
	}
}
