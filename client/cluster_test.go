package client_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testport"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// fakeNode is a TCP listener on loopback that speaks the line protocol:
// it reads a three-line request, records its command and answers with
// what its handler returns. An empty answer closes the connection without
// answering, after the request was read.
type fakeNode struct {
	Addr string

	mu     sync.Mutex
	handle func(cmd, key, arg string) string
	seen   map[string]int
	ids    []string // the request ids the key lines carried, in order
	// session answers session requests; "" for "error" (no sessions).
	session string
}

func newFakeNode(t *testing.T, handle func(cmd, key, arg string) string) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{Addr: ln.Addr().String(), handle: handle, seen: map[string]int{}}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Range(func(c, _ any) bool { _ = c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conns.Delete(c)
				defer c.Close()
				n.serve(c)
			}()
		}
	}()
	return n
}

func (n *fakeNode) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		var req [3]string
		for i := range req {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			req[i] = strings.TrimRight(line, "\r\n")
		}
		if req[0] == "session" {
			// A server without sessions (a single node's answer).
			n.mu.Lock()
			answer := cmp.Or(n.session, "error")
			n.mu.Unlock()
			if _, err := io.WriteString(c, answer+"\n"); err != nil {
				return
			}
			continue
		}
		n.mu.Lock()
		n.seen[req[0]]++
		if key, id, ok := strings.Cut(req[1], " @"); ok {
			req[1] = key
			n.ids = append(n.ids, req[0]+" "+id)
		}
		h := n.handle
		n.mu.Unlock()
		answer := h(req[0], req[1], req[2])
		if answer == "" {
			return // dropped after the request was read
		}
		if _, err := io.WriteString(c, answer+"\n"); err != nil {
			return
		}
	}
}

func (n *fakeNode) setHandler(h func(cmd, key, arg string) string) {
	n.mu.Lock()
	n.handle = h
	n.mu.Unlock()
}

// count returns how many requests of cmd the node has read.
func (n *fakeNode) count(cmd string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.seen[cmd]
}

// requestIDs returns the commands and request ids the node has read.
func (n *fakeNode) requestIDs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.ids...)
}

// notLeader answers every request as a follower that names leader.
func notLeader(leader string) func(cmd, key, arg string) string {
	return func(string, string, string) string {
		if leader == "" {
			return "error_not_leader"
		}
		return "error_not_leader " + leader
	}
}

// drop reads a request and closes the connection without answering.
func drop(string, string, string) string { return "" }

// fakeTable is the replicated state of a fake cluster: the nodes whose
// handler is its serve method share it, as a leader and its successor
// share the raft log. It knows try-locks, renewals and releases.
type fakeTable struct {
	mu    sync.Mutex
	fence uint64
	held  map[string]fakeLease
}

type fakeLease struct {
	token string
	end   time.Time
}

func newFakeTable() *fakeTable { return &fakeTable{fence: 1 << 40, held: map[string]fakeLease{}} }

func (tb *fakeTable) serve(cmd, key, arg string) string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	now := time.Now()
	f := strings.Fields(arg)
	ttl := func(i int) int {
		if len(f) > i {
			if v, err := strconv.Atoi(f[i]); err == nil {
				return v
			}
		}
		return 33
	}
	cur, ok := tb.held[key]
	ok = ok && now.Before(cur.end)
	switch cmd {
	case "l":
		if ok {
			return "timeout"
		}
		tb.fence++
		tok := fmt.Sprintf("%016x%016x", tb.fence, 0x5a17)
		d := ttl(1)
		tb.held[key] = fakeLease{token: tok, end: now.Add(time.Duration(d) * time.Second)}
		return fmt.Sprintf("ok %s %d", tok, d)
	case "n":
		if !ok || len(f) == 0 || f[0] != cur.token {
			return "error"
		}
		d := ttl(1)
		tb.held[key] = fakeLease{token: cur.token, end: now.Add(time.Duration(d) * time.Second)}
		return fmt.Sprintf("ok %d", d)
	case "r":
		if !ok || arg != cur.token {
			return "error"
		}
		delete(tb.held, key)
		return "ok"
	case "stats":
		return `ok {"connections":1}`
	}
	return "error"
}

func (tb *fakeTable) holder(key string) string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if l, ok := tb.held[key]; ok && time.Now().Before(l.end) {
		return l.token
	}
	return ""
}

func dialCluster(t *testing.T, seeds []string, opts ...client.Option) *client.Cluster {
	t.Helper()
	c, err := client.DialCluster(context.Background(), seeds, opts...)
	if err != nil {
		t.Fatalf("DialCluster(%v): %v", seeds, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestClusterFollowsRedirect(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	follower := newFakeNode(t, notLeader(srv.Addr))
	ctx := context.Background()
	c := dialCluster(t, []string{follower.Addr})

	g, err := c.Acquire(ctx, "job", 0, 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if c.Addr() != srv.Addr || follower.count("l") != 1 || waitersOn(srv, "job") != 0 {
		t.Fatalf("addr %s (want %s), follower saw %d acquires (want 1), held on leader: %v",
			c.Addr(), srv.Addr, follower.count("l"), waitersOn(srv, "job") == 0)
	}
	if rem, err := c.Renew(ctx, "job", g.Token, 20*time.Second); err != nil || rem != 20*time.Second {
		t.Fatalf("Renew = %v, %v", rem, err)
	}
	if _, err := c.Acquire(ctx, "job", 0, 0); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("second Acquire = %v, want ErrTimeout (an answer, not retried)", err)
	}
	if st, err := c.Stats(ctx); err != nil || len(st.Locks) != 1 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	if err := c.Release(ctx, "job", g.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// A Lock over the same cluster: its grant's Cluster is redirected too.
	l := &client.Lock{Key: "lk", LeaseTTL: 10, Cluster: []string{follower.Addr}}
	if got, err := l.Acquire(ctx); !got || err != nil {
		t.Fatalf("Lock.Acquire = %v, %v", got, err)
	}
	if waitersOn(srv, "lk") != 0 || !l.Held() {
		t.Fatal("the Lock's grant is not on the leader")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Lock.Release: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "lk") == -1 }, "lock released")
}

func TestClusterUnknownLeaderTriesNextSeed(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	electing := newFakeNode(t, notLeader(""))
	c := dialCluster(t, []string{electing.Addr, srv.Addr}, client.WithBackoff(100*time.Millisecond, 100*time.Millisecond))
	start := time.Now()
	if _, err := c.Acquire(context.Background(), "k", 0, 0); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	// Equal jitter: the pause is between half the delay and the delay.
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("retried after %v; want a backoff of at least 50ms", d)
	}
	if electing.count("l") != 1 || c.Addr() != srv.Addr || waitersOn(srv, "k") != 0 {
		t.Fatalf("first seed saw %d acquires, now at %s; want 1, %s", electing.count("l"), c.Addr(), srv.Addr)
	}
}

func TestClusterBudgetExhausted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fast := client.WithBackoff(time.Millisecond, 5*time.Millisecond)

	t.Run("redirect loop", func(t *testing.T) {
		a := newFakeNode(t, nil)
		b := newFakeNode(t, notLeader(a.Addr))
		a.setHandler(notLeader(b.Addr))
		c := dialCluster(t, []string{a.Addr}, fast, client.WithMaxAttempts(5))
		_, err := c.Acquire(ctx, "k", 0, 0)
		var nl *client.NotLeaderError
		if !errors.Is(err, client.ErrNoLeader) || !errors.As(err, &nl) {
			t.Fatalf("Acquire = %v; want ErrNoLeader wrapping a NotLeaderError", err)
		}
		if n := a.count("l") + b.count("l"); n != 5 {
			t.Fatalf("%d acquires sent, want 5 (the budget)", n)
		}
	})
	t.Run("no leader", func(t *testing.T) {
		a, b := newFakeNode(t, notLeader("")), newFakeNode(t, notLeader(""))
		c := dialCluster(t, []string{a.Addr, b.Addr}, fast, client.WithMaxAttempts(4))
		if err := c.Release(ctx, "k", tok1); !errors.Is(err, client.ErrNoLeader) {
			t.Fatalf("Release = %v, want ErrNoLeader", err)
		}
		if a.count("r") != 2 || b.count("r") != 2 {
			t.Fatalf("releases sent %d, %d; want the seeds in turn, 2 each", a.count("r"), b.count("r"))
		}
	})
	t.Run("no seed answers", func(t *testing.T) {
		dead := testport.Free(t)
		_, err := client.DialCluster(ctx, []string{dead}, fast, client.WithMaxAttempts(3))
		var op *net.OpError
		if !errors.Is(err, client.ErrNoLeader) || !errors.As(err, &op) {
			t.Fatalf("DialCluster = %v; want ErrNoLeader wrapping the dial error", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		a := newFakeNode(t, notLeader(""))
		// A backoff (2 to 4 h with its jitter) past a deadline an hour
		// off: giving up at once comes well within the test's 10 s,
		// waiting for the deadline does not.
		c := dialCluster(t, []string{a.Addr}, client.WithBackoff(4*time.Hour, 4*time.Hour), client.WithMaxAttempts(100))
		dctx, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		errc := make(chan error, 1)
		go func() { _, err := c.Acquire(dctx, "k", 0, 0); errc <- err }()
		select {
		case err := <-errc:
			if !errors.Is(err, client.ErrNoLeader) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire = %v; want ErrNoLeader and DeadlineExceeded", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("still retrying after 10 s; a backoff past the deadline should end it at once")
		}
	})
}

func TestClusterUnknownOutcome(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx := context.Background()
	dropper := newFakeNode(t, drop)

	// An acquire whose connection broke after it was written is sent
	// again, with the same request id: the caller sees one grant.
	c := dialCluster(t, []string{dropper.Addr, srv.Addr}, client.WithBackoff(time.Millisecond, time.Millisecond))
	if _, err := c.Acquire(ctx, "k", 0, 0); err != nil {
		t.Fatalf("Acquire = %v, want it retried on the live seed", err)
	}
	ids := dropper.requestIDs()
	if dropper.count("l") != 1 || len(ids) != 1 || !strings.HasPrefix(ids[0], "l ") || waitersOn(srv, "k") != 0 {
		t.Fatalf("dropper saw %d acquires with ids %q; held on the other seed: %v", dropper.count("l"), ids, waitersOn(srv, "k") == 0)
	}
	// Without room for a request id on the key line (a 256-byte key),
	// the outcome stays unknown and nothing is retried.
	long := strings.Repeat("k", 256)
	c1 := dialCluster(t, []string{dropper.Addr, srv.Addr})
	if _, err := c1.Acquire(ctx, long, 0, 0); !errors.Is(err, client.ErrUnknownOutcome) || waitersOn(srv, long) != -1 {
		t.Fatalf("Acquire of a long key = %v, want ErrUnknownOutcome and no retry", err)
	}
	c2 := dialCluster(t, []string{dropper.Addr, srv.Addr})
	if _, _, err := c2.Enqueue(ctx, long, 0); !errors.Is(err, client.ErrUnknownOutcome) || waitersOn(srv, long) != -1 {
		t.Fatalf("Enqueue = %v, want ErrUnknownOutcome and no retry", err)
	}

	// Release names a token: after the same failure it is retried on the
	// next seed.
	g, err := dial(t, srv.Addr).Acquire(ctx, "held", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c3 := dialCluster(t, []string{dropper.Addr, srv.Addr}, client.WithBackoff(time.Millisecond, time.Millisecond))
	if err := c3.Release(ctx, "held", g.Token); err != nil {
		t.Fatalf("Release = %v, want it retried on the live seed", err)
	}
	if dropper.count("r") != 1 || waitersOn(srv, "held") != -1 {
		t.Fatalf("dropper saw %d releases; lock still held: %v", dropper.count("r"), waitersOn(srv, "held") != -1)
	}
}

// A release whose connection broke after the old leader applied it is
// retried on the new leader, which no longer knows the token: that is a
// success, not ErrNotHolder.
func TestClusterReleaseAppliedThenDropped(t *testing.T) {
	t.Parallel()
	tb := newFakeTable()
	ctx := context.Background()
	old := newFakeNode(t, func(cmd, key, arg string) string {
		if ans := tb.serve(cmd, key, arg); cmd != "r" {
			return ans
		}
		return "" // applied, then the node died before answering
	})
	next := newFakeNode(t, tb.serve)
	c := dialCluster(t, []string{old.Addr, next.Addr}, client.WithBackoff(time.Millisecond, time.Millisecond))
	g, err := c.Acquire(ctx, "job", 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, "job", g.Token); err != nil {
		t.Fatalf("Release = %v, want nil (the first attempt released it)", err)
	}
	if tb.holder("job") != "" || old.count("r") != 1 || next.count("r") != 1 {
		t.Fatalf("holder %q, releases at old %d, next %d", tb.holder("job"), old.count("r"), next.count("r"))
	}
	// Without a broken attempt, releasing a lock not held is still an error.
	if err := c.Release(ctx, "job", g.Token); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("second Release = %v, want ErrNotHolder", err)
	}
}

func TestLockRenewFollowsNewLeader(t *testing.T) {
	t.Parallel()
	tbl := newFakeTable()
	a := newFakeNode(t, tbl.serve)
	b := newFakeNode(t, notLeader(a.Addr))
	ctx := context.Background()
	l := &client.Lock{Key: "k", LeaseTTL: 1, Cluster: []string{a.Addr, b.Addr}}
	if got, err := l.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	tok := l.Token()
	testutil.Eventually(t, 5*time.Second, func() bool { return a.count("n") >= 1 }, "renewed on the first leader")

	// Failover: b leads, a follows and names b.
	b.setHandler(tbl.serve)
	a.setHandler(notLeader(b.Addr))
	testutil.Eventually(t, 5*time.Second, func() bool { return b.count("n") >= 2 }, "renewed on the new leader")
	if !l.Held() || closedNow(l.Lost()) || l.Token() != tok || tbl.holder("k") != tok {
		t.Fatalf("Held %v, Err %v, token %s -> %s, table holds %s", l.Held(), l.Err(), tok, l.Token(), tbl.holder("k"))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if b.count("r") != 1 || tbl.holder("k") != "" || a.count("l") != 1 || b.count("l") != 0 {
		t.Fatalf("releases on b %d, holder %q, acquires %d+%d; want 1, none, 1+0",
			b.count("r"), tbl.holder("k"), a.count("l"), b.count("l"))
	}
}

func TestLockLostWhenClusterHasNoLeader(t *testing.T) {
	t.Parallel()
	tbl := newFakeTable()
	a := newFakeNode(t, tbl.serve)
	l := &client.Lock{Key: "k", LeaseTTL: 1, Cluster: []string{a.Addr},
		Options: []client.Option{client.WithBackoff(10*time.Millisecond, 50*time.Millisecond), client.WithMaxAttempts(1000)}}
	if got, err := l.Acquire(context.Background()); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	a.setHandler(notLeader(""))
	if !lost(l.Lost(), 5*time.Second) {
		t.Fatal("Lost not closed though no node would renew")
	}
	var nl *client.NotLeaderError
	if l.Held() || !errors.Is(l.Err(), client.ErrNoLeader) || !errors.As(l.Err(), &nl) {
		t.Fatalf("Held %v, Err %v; want false, ErrNoLeader wrapping a NotLeaderError", l.Held(), l.Err())
	}
	if a.count("l") != 1 {
		t.Fatalf("%d acquires: a lost lease must not be re-acquired", a.count("l"))
	}
	if err := l.Release(context.Background()); !errors.Is(err, client.ErrLost) {
		t.Fatalf("Release = %v, want ErrLost", err)
	}
}
