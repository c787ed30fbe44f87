package server_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// grants parses "ok <token1> ... <tokenN> <ttl>" and returns the tokens.
func grants(t testing.TB, line string, n int) []string {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != n+2 || f[0] != "ok" {
		t.Fatalf("got %q, want ok and %d tokens and a ttl", line, n)
	}
	for _, tok := range f[1 : n+1] {
		if _, err := fence.ParseString(tok); err != nil {
			t.Fatalf("bad token in %q: %v", line, err)
		}
	}
	return f[1 : n+1]
}

// waiters returns the waiters of key on s's engine.
func waiters(s *servertest.Server, key string) int {
	for _, l := range s.Engine.Snapshot(0).Locks {
		if l.Key == key {
			return l.Waiters
		}
	}
	return 0
}

func TestMultiLockAllOrNoneOverTCP(t *testing.T) {
	s := servertest.StartServer(t)
	a, c, d := dial(t, s.Addr), dial(t, s.Addr), dial(t, s.Addr)
	tb := grant(t, a.do("l", "b", "0"), "ok")
	if got := c.do("ml", "a b", "0"); got != "timeout" {
		t.Fatalf("try of a busy set: %q", got)
	}
	c.req("ml", "a b", "10 30")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "a") == 1 }, "set queued on a")
	// a is free but the set queued first: a single l waits behind it.
	d.req("l", "a", "10")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "a") == 2 }, "single behind the set")
	if got := a.do("r", "b", tb); got != "ok" {
		t.Fatal(got)
	}
	toks := grants(t, c.line(), 2)
	fa, _ := fence.ParseString(toks[0])
	fb, _ := fence.ParseString(toks[1])
	if fa.Fence == fb.Fence {
		t.Fatalf("one fence for two keys: %v", toks)
	}
	if got := c.do("n", "b", toks[1]); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("renew of b: %q", got)
	}
	if got := c.do("r", "a", toks[0]); got != "ok" {
		t.Fatalf("release of a: %q", got)
	}
	dt := grant(t, d.line(), "ok")
	if f, _ := fence.ParseString(dt); f.Fence <= fa.Fence {
		t.Fatalf("later grant's fence %d not above the set's %d", f.Fence, fa.Fence)
	}
	if got := c.do("r", "b", toks[1]); got != "ok" {
		t.Fatalf("release of b: %q", got)
	}
}

func TestMultiLockTimeoutAndDisconnect(t *testing.T) {
	s := servertest.StartServer(t)
	a, c, d := dial(t, s.Addr), dial(t, s.Addr), dial(t, s.Addr)
	grant(t, a.do("l", "y", "0"), "ok")
	// The wait times out and leaves every key.
	if got := c.do("ml", "x y", "1"); got != "timeout" {
		t.Fatalf("set wait: %q", got)
	}
	if waiters(s, "x") != 0 || waiters(s, "y") != 0 {
		t.Fatal("a timed-out set is still queued")
	}
	// A disconnect withdraws a waiting set from every key.
	d.req("ml", "x y", "30")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "x") == 1 }, "set queued")
	_ = d.c.Close()
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "x")+waiters(s, "y") == 0 }, "set withdrawn")
	// And releases a held set.
	e := dial(t, s.Addr)
	grants(t, e.do("ml", "p q", "0"), 2)
	_ = e.c.Close()
	f := dial(t, s.Addr)
	grants(t, f.do("ml", "q p", "5"), 2)
	// msl takes a slot of each semaphore.
	g := dial(t, s.Addr)
	grants(t, g.do("msl", "s1 s2", "0 2"), 2)
	grants(t, g.do("msl", "s2 s1", "0 2"), 2)
	if got := g.do("msl", "s1 s3", "0 2"); got != "timeout" {
		t.Fatalf("third slot of s1: %q", got)
	}
	if got := g.do("ml", "a a", "0"); got != "error" {
		t.Fatalf("repeated key: %q", got)
	}
	if got := g.do("ml", "s1 z", "0"); got != "error_limit_mismatch" {
		t.Fatalf("lock over a semaphore: %q", got)
	}
}

// TestMultiLockCrossingSetsOverTCP has many connections take random sets
// of keys in random orders ({a,b} against {b,a}, {a,c} ...) and release
// them; no two may hold a key at once, and every one must finish: a
// deadlock would leave some waiting forever.
func TestMultiLockCrossingSetsOverTCP(t *testing.T) {
	s := servertest.StartServer(t)
	keys := []string{"a", "b", "c", "d"}
	var inUse [4]atomic.Int32
	const conns, rounds = 12, 40
	var wg sync.WaitGroup
	var done atomic.Int64
	for w := range conns {
		c := dial(t, s.Addr)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for range rounds {
				perm := rng.Perm(len(keys))[:1+rng.IntN(3)]
				var ks []string
				for _, p := range perm {
					ks = append(ks, keys[p])
				}
				c.req("ml", strings.Join(ks, " "), "60")
				line, err := c.br.ReadString('\n')
				if err != nil {
					t.Errorf("read: %v", err)
					return
				}
				f := strings.Fields(line)
				if len(f) != len(ks)+2 || f[0] != "ok" {
					t.Errorf("set %v: %q", ks, line)
					return
				}
				for _, p := range perm {
					if inUse[p].Add(1) != 1 {
						t.Errorf("key %s held twice", keys[p])
					}
				}
				for _, p := range perm {
					inUse[p].Add(-1)
				}
				var b strings.Builder
				for i, k := range ks {
					fmt.Fprintf(&b, "r\n%s\n%s\n", k, f[i+1])
				}
				c.send(b.String())
				for range ks {
					if l, err := c.br.ReadString('\n'); err != nil || l != "ok\n" {
						t.Errorf("release: %q %v", l, err)
						return
					}
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if done.Load() != conns*rounds {
		t.Fatalf("%d of %d sets done", done.Load(), conns*rounds)
	}
}

// TestClusterFailoverKeepsMultiLock holds a set through the log, with a
// second set queued behind it on one key, then stops the leader: on the
// new leader each key of the held set is still held (renewed and released
// by its own token), and fences go on above the set's.
func TestClusterFailoverKeepsMultiLock(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	holder := dial(t, ms[li].Addr)
	toks := grants(t, holder.do("ml", "inv pay", "0 30"), 2)
	var fences [2]uint64
	for i, tok := range toks {
		f, _ := fence.ParseString(tok)
		fences[i] = f.Fence
	}
	if got := dial(t, ms[li].Addr).do("ml", "pay ship", "0"); got != "timeout" {
		t.Fatalf("crossing set through the log: %q", got)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		for i, m := range c.Members() {
			if i != li && m.Node.FSM().AppliedIndex() < ms[li].Node.FSM().AppliedIndex() {
				return false
			}
		}
		return true
	}, "followers did not catch up")
	c.Stop(li)
	nl := c.Leader(servertest.LeaderTimeout)
	cl := dial(t, ms[nl].Addr)
	if got := cl.do("ml", "ship pay", "0"); got != "timeout" {
		t.Fatalf("set over a held key after failover: %q", got)
	}
	grantSurvived(t, cl, "inv", toks[0], fences[0])
	grantSurvived(t, cl, "pay", toks[1], fences[1])
	got := grants(t, cl.do("ml", "ship other", "0 30"), 2)
	if f, _ := fence.ParseString(got[0]); f.Fence <= max(fences[0], fences[1]) {
		t.Fatalf("new set's fence %d not above the old set's", f.Fence)
	}
}

// TestClusterMultiLockQueued: a set queued through the log is granted,
// through the log, when the key it waits for is released.
func TestClusterMultiLockQueued(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	holder, w := dial(t, ms[li].Addr), dial(t, ms[li].Addr)
	tok := grant(t, holder.do("l", "q1", "0 30"), "ok")
	w.req("ml", "q2 q1", "20 30")
	eng := ms[li].Node.FSM().Engine()
	testutil.Eventually(t, 30*time.Second, func() bool {
		info, ok := eng.Inspect(0, "q2")
		return ok && info.WaitersTotal == 1
	}, "set queued")
	if got := holder.do("r", "q1", tok); got != "ok" {
		t.Fatal(got)
	}
	toks := grants(t, w.line(), 2)
	if got := w.do("r", "q2", toks[0]); got != "ok" {
		t.Fatal(got)
	}
}
