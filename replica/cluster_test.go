package replica

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/clock"
)

func TestElection(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	for _, n := range c.nodes {
		if n != l && n.IsLeader() {
			t.Fatalf("%s and %s both lead", l.ID(), n.ID())
		}
	}
	poll(t, 5*time.Second, "every node naming the leader", func() bool {
		for _, n := range c.nodes {
			if n.Leader().LeaderID != l.ID() {
				return false
			}
		}
		return true
	})
}

// TestReplicatesEveryCommand runs every command type through the leader
// and checks the answers, the Sink of a parked acquire, and that all three
// engines end in the same state.
func TestReplicatesEveryCommand(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	ctx := ctxT(t, 10*time.Second)
	const min = time.Minute
	req := func(key string, owner engine.OwnerID, limit int, timeout time.Duration) engine.AcquireReq {
		return engine.AcquireReq{Key: []byte(key), Owner: owner, Limit: limit, TTL: min, Timeout: timeout}
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	want := func(what string, got engine.Outcome, err error, res engine.Result) engine.Outcome {
		t.Helper()
		if err != nil || got.Result != res {
			t.Fatalf("%s = %v, %v; want %v", what, got.Result, err, res)
		}
		return got
	}

	must("OpenSession", l.OpenSession(ctx, 100, 30*time.Second, 0x5eed))
	if ok, err := l.BeginSession(ctx, 100); !ok || err != nil {
		t.Fatalf("BeginSession = %v, %v; want true", ok, err)
	}
	must("EndSession", l.EndSession(ctx, 100))

	a1, err := l.Acquire(ctx, req("a", 1, 1, 0), nil)
	want("acquire a by 1", a1, err, engine.Granted)
	parked := newChanSink()
	out, err := l.Acquire(ctx, req("a", 2, 1, 10*time.Second), parked)
	want("acquire a by 2", out, err, engine.Queued)
	out, err = l.Acquire(ctx, req("a", 9, 1, 0), nil)
	want("try-lock a by 9", out, err, engine.TimedOut)

	out, err = l.Enqueue(ctx, req("b", 3, 2, 0))
	want("enqueue b by 3", out, err, engine.Granted)
	out, err = l.Enqueue(ctx, req("b", 4, 2, 0))
	want("enqueue b by 4", out, err, engine.Granted)
	out, err = l.Enqueue(ctx, req("b", 5, 2, 0))
	want("enqueue b by 5", out, err, engine.Queued)
	waiting := newChanSink()
	out, err = l.Wait(ctx, []byte("b"), 5, 10*time.Second, waiting)
	want("wait b by 5", out, err, engine.Queued)
	if _, err := l.Enqueue(ctx, req("b", 3, 2, 0)); !errors.Is(err, engine.ErrAlreadyQueued) {
		t.Fatalf("second enqueue = %v; want ErrAlreadyQueued", err)
	}

	if ttl, err := l.Renew(ctx, []byte("a"), a1.Token, 2*min, 0); ttl != 2*min || err != nil {
		t.Fatalf("Renew = %v, %v; want %v", ttl, err, 2*min)
	}
	bad := a1.Token
	bad.Salt++
	if err := l.Release(ctx, []byte("a"), bad); !errors.Is(err, engine.ErrNotHolder) {
		t.Fatalf("Release with a wrong salt = %v; want ErrNotHolder", err)
	}
	must("Release a", l.Release(ctx, []byte("a"), a1.Token))
	got := parked.wait(t, 5*time.Second)
	if got.Result != engine.Granted || got.Token.Fence <= a1.Token.Fence {
		t.Fatalf("parked acquire heard %v %v; want granted with a fence above %d", got.Result, got.Token, a1.Token.Fence)
	}

	out, err = l.Acquire(ctx, req("c", 100, 1, 0), nil)
	want("acquire c by session", out, err, engine.Granted)
	if ok, err := l.CloseSession(ctx, 100); !ok || err != nil {
		t.Fatalf("CloseSession = %v, %v; want true", ok, err)
	}
	must("Disconnect 4 keeping leases", l.Disconnect(ctx, 4, false))
	must("Disconnect 3 releasing", l.Disconnect(ctx, 3, true)) // b passes to 5
	if got := waiting.wait(t, 5*time.Second); got.Result != engine.Granted {
		t.Fatalf("parked wait heard %v; want granted", got.Result)
	}
	if _, err := l.Propose(ctx, Command{Op: OpExpire}, nil); err != nil {
		t.Fatalf("Propose(expire): %v", err)
	}
	if _, err := l.Propose(ctx, Command{Op: OpRestamp}, nil); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("Propose(restamp) = %v; want ErrBadCommand", err)
	}

	waitSame(t, c.nodes...)
	now := clock.Now()
	for _, n := range c.nodes {
		if h, ok := lockHolder(n, "a", now); !ok || h.OwnerConnID != 2 {
			t.Fatalf("%s: lock a held by %+v (%v); want owner 2", n.ID(), h, ok)
		}
		if _, ok := lockHolder(n, "c", now); ok {
			t.Fatalf("%s: lock c still held after its session closed", n.ID())
		}
		if _, g := n.FSM().Engine().Metrics(); g.Held != 3 || g.Waiting != 0 || g.Sessions != 0 {
			t.Fatalf("%s: gauges %+v; want 3 held (a by 2, b by 4 and 5), none waiting, no session", n.ID(), g)
		}
	}
	if p := l.FSM().pendingCount(); p != 0 {
		t.Fatalf("leader keeps %d pending sinks; want 0", p)
	}
}

// TestParkedTimesOut: the leader's expiry loop proposes the Expire that
// ends a parked wait, and the Sink hears TimedOut.
func TestParkedTimesOut(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	ctx := ctxT(t, 10*time.Second)
	if out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte("x"), Owner: 1, Limit: 1}, nil); err != nil || out.Result != engine.Granted {
		t.Fatalf("Acquire = %v, %v", out.Result, err)
	}
	s := newChanSink()
	start := time.Now()
	out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte("x"), Owner: 2, Limit: 1, Timeout: 150 * time.Millisecond}, s)
	if err != nil || out.Result != engine.Queued {
		t.Fatalf("Acquire = %v, %v; want queued", out.Result, err)
	}
	if got := s.wait(t, 5*time.Second); got.Result != engine.TimedOut {
		t.Fatalf("sink heard %v; want timed_out", got.Result)
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("wait timed out after %v, before its 150ms", el)
	}
	waitSame(t, c.nodes...)
}

func TestFollowerRedirect(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	ctx := ctxT(t, 10*time.Second)
	for _, f := range c.nodes {
		if f == l {
			continue
		}
		var nl *NotLeaderError
		poll(t, 5*time.Second, "a redirect naming the leader's client address", func() bool {
			_, err := f.Acquire(ctx, engine.AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1}, nil)
			if !errors.Is(err, ErrNotLeader) || !errors.As(err, &nl) {
				t.Fatalf("follower %s: Acquire = %v; want ErrNotLeader", f.ID(), err)
			}
			// The peers carry no client address: it is learned from the
			// leader's Restamp entry once the follower has applied it.
			return nl.LeaderID == l.ID() && nl.ClientAddr == "client-"+l.ID() && nl.HTTPAddr == "http-"+l.ID()
		}, func() string { return nl.Error() + " http " + nl.HTTPAddr })
	}
	_, g := l.FSM().Engine().Metrics()
	if g.Keys != 0 {
		t.Fatalf("leader holds %d keys after follower-only proposals; want 0", g.Keys)
	}
}

// failoverGrant is one acknowledged grant of the failover test.
type failoverGrant struct {
	key   string
	tok   fence.Token
	at    time.Time
	after bool // acknowledged after the old leader was shut down
}

// TestLeaderFailover kills the leader while clients acquire and release:
// no acknowledged grant is lost, no key has two holders, leases keep their
// time, and every fence issued after the failover is above every fence
// acknowledged before it.
func TestLeaderFailover(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader(t)
	const keys = 32
	keyName := func(i int) string { return fmt.Sprint("k", i) }

	var (
		mu      sync.Mutex
		held    = map[fence.Token]failoverGrant{} // acknowledged, not released
		unknown = map[fence.Token]bool{}          // a release whose answer was lost
		grants  []failoverGrant
		killed  bool
		nodesMu sync.Mutex
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	liveNodes := func() []*Node {
		nodesMu.Lock()
		defer nodesMu.Unlock()
		return c.live()
	}
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			owner := engine.OwnerID(w + 1)
			var mine []failoverGrant
			for {
				select {
				case <-stop:
					return
				default:
				}
				l := c.findLeader(liveNodes())
				if l == nil {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond): // back off until a leader is ready
					}
					continue
				}
				ctx := ctxT(t, 2*time.Second)
				if len(mine) >= 3 || (len(mine) > 0 && rng.IntN(2) == 0) {
					g := mine[0]
					err := l.Release(ctx, []byte(g.key), g.tok)
					mu.Lock()
					switch {
					case err == nil || (errors.Is(err, engine.ErrNotHolder) && unknown[g.tok]):
						// Released now, or by an earlier try whose answer was lost.
						delete(held, g.tok)
						delete(unknown, g.tok)
						mine = mine[1:]
					case errors.Is(err, engine.ErrNotHolder):
						t.Errorf("release of %s %v: %v; the grant was lost", g.key, g.tok, err)
						mine = mine[1:]
					default:
						unknown[g.tok] = true // try again, on the leader to come
					}
					mu.Unlock()
					continue
				}
				key := keyName(rng.IntN(keys))
				// A request sent before the kill was served by the old
				// leader even when its answer is recorded after the kill.
				mu.Lock()
				after := killed
				mu.Unlock()
				out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte(key), Owner: owner, Limit: 1, TTL: time.Minute}, nil)
				if err != nil || out.Result != engine.Granted {
					continue
				}
				mu.Lock()
				g := failoverGrant{key: key, tok: out.Token, at: time.Now(), after: after}
				held[out.Token] = g
				grants = append(grants, g)
				mu.Unlock()
				mine = append(mine, g)
			}
		}()
	}
	count := func(after bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, g := range grants {
			if g.after == after {
				n++
			}
		}
		return n
	}
	poll(t, 10*time.Second, "30 grants before the kill", func() bool { return count(false) >= 30 })

	old := c.leader(t)
	nodesMu.Lock()
	// Hold the node list while killing, so no worker reaches the old
	// leader after the kill is recorded.
	c.kill(t, c.index(old))
	nodesMu.Unlock()
	mu.Lock()
	killed = true
	mu.Unlock()

	newL := c.leader(t)
	poll(t, 10*time.Second, "30 grants after the failover", func() bool { return count(true) >= 30 })
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var before uint64 // the highest fence the old leader acknowledged
	for _, g := range grants {
		if !g.after && g.tok.Fence > before {
			before = g.tok.Fence
		}
	}
	for _, g := range grants {
		if g.after && g.tok.Fence <= before {
			t.Errorf("fence %d granted after the failover, not above %d", g.tok.Fence, before)
		}
	}
	now := clock.Now()
	perKey := map[string]fence.Token{}
	for tok, g := range held {
		if unknown[tok] {
			continue
		}
		if other, ok := perKey[g.key]; ok {
			t.Errorf("key %s held by two acknowledged tokens: %v and %v", g.key, other, tok)
		}
		perKey[g.key] = tok
		h, ok := lockHolder(newL, g.key, now)
		if !ok {
			t.Errorf("grant %v on %s lost in the failover", tok, g.key)
			continue
		}
		// The lease was 1 min when granted; the failover may add time to
		// it but never take any: what is left is at least a minute minus
		// the time since the grant.
		if left := time.Duration(h.LeaseExpiresInS * float64(time.Second)); left < time.Minute-time.Since(g.at)-time.Second {
			t.Errorf("lease on %s has %v left, %v after a 1 min grant", g.key, left, time.Since(g.at))
		}
	}
	ctx := ctxT(t, 5*time.Second)
	for key, tok := range perKey {
		if _, err := newL.Renew(ctx, []byte(key), tok, 0, 0); err != nil {
			t.Errorf("Renew of %s %v on the new leader: %v", key, tok, err)
		}
	}
	waitSame(t, c.live()...)
}

// TestMinorityCannotGrant isolates the leader: it cannot grant, the
// majority elects a leader that can, and after healing the old leader
// holds the majority's state.
func TestMinorityCannotGrant(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.leader(t)
	oi := c.index(old)
	var rest []*Node
	for i, n := range c.nodes {
		if i != oi {
			rest = append(rest, n)
		}
	}
	c.isolate(oi)

	ctx := ctxT(t, 3*time.Second)
	out, err := old.Acquire(ctx, engine.AcquireReq{Key: []byte("p"), Owner: 7, Limit: 1, TTL: time.Minute}, nil)
	if err == nil {
		t.Fatalf("the isolated leader answered %v; want an error", out.Result)
	}
	if _, ok := lockHolder(old, "p", clock.Now()); ok {
		t.Fatal("the isolated leader applied a grant it could not commit")
	}

	l := c.leaderAmong(t, rest)
	ctx = ctxT(t, 5*time.Second)
	got, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte("p"), Owner: 8, Limit: 1, TTL: time.Minute}, nil)
	if err != nil || got.Result != engine.Granted {
		t.Fatalf("majority leader: Acquire = %v, %v; want granted", got.Result, err)
	}
	if old.IsLeader() {
		t.Fatal("the isolated node still calls itself leader")
	}

	c.connectAll()
	waitSame(t, c.nodes...)
	if h, ok := lockHolder(old, "p", clock.Now()); !ok || h.OwnerConnID != 8 {
		t.Fatalf("after healing the old leader has p held by %+v (%v); want owner 8", h, ok)
	}
}

// TestSnapshotCatchUp adds a node after the leader has snapshotted and
// dropped its early log: the new node must catch up by snapshot, then by
// log, to the same state.
func TestSnapshotCatchUp(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.TrailingLogs = 4 })
	l := c.leader(t)
	ctx := ctxT(t, 20*time.Second)
	load := func(n int, base engine.OwnerID) {
		var toks []fence.Token
		var keys []string
		for i := range n {
			key := string(rune('a' + i%7))
			out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte(key), Owner: base + engine.OwnerID(i%5), Limit: 2,
				TTL: time.Minute, Timeout: time.Minute}, newChanSink())
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			if out.Result == engine.Granted && i%3 == 0 {
				toks, keys = append(toks, out.Token), append(keys, key)
			}
		}
		for i, tok := range toks {
			if err := l.Release(ctx, []byte(keys[i]), tok); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}
	load(60, 1)
	if err := snapshotNow(l); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	load(10, 20) // a few entries past the snapshot, kept in the log

	n := c.addNode(t)
	waitSame(t, c.live()...)
	if n.FSM().Restores() == 0 {
		t.Fatal("the new node caught up without restoring a snapshot")
	}
	load(10, 40)
	state := waitSame(t, c.live()...)
	if len(state) < 100 {
		t.Fatalf("state is only %d bytes; the load left nothing", len(state))
	}
}

// pendingCount is how many parked requests' sinks the FSM routes.
func (f *FSM) pendingCount() int {
	f.pendMu.Lock()
	defer f.pendMu.Unlock()
	return len(f.pending)
}
