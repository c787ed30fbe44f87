package client_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// muxRig is a 3-node cluster whose sessions outlive a connection for long
// enough, and the addresses of its members.
type muxRig struct {
	c     *servertest.Cluster
	addrs []string
}

func startMuxRig(t *testing.T) *muxRig { return startRig(t, 20*time.Second) }

// startRig starts a 3-node cluster with --orphan-ttl orphanTTL.
func startRig(t *testing.T, orphanTTL time.Duration) *muxRig {
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		ServerEdit: func(cfg *server.Config) { cfg.OrphanTTL = orphanTTL }})
	r := &muxRig{c: c}
	for _, m := range c.Members() {
		r.addrs = append(r.addrs, m.Addr)
	}
	return r
}

// lock returns the state of key on member i: its holder's presence and
// its waiters (-1 waiters: the key is not held).
func (r *muxRig) lock(i int, key string) engine.LockStat {
	for _, l := range r.c.Members()[i].Node.FSM().Engine().Snapshot(0).Locks {
		if l.Key == key {
			return l
		}
	}
	return engine.LockStat{Waiters: -1}
}

// dialMux opens a Mux of one connection over addrs, failing the test on
// an error.
func dialMux(t *testing.T, addrs []string, opts ...client.Option) *client.Mux {
	t.Helper()
	m, err := client.DialMux(context.Background(), addrs, 1, append(opts, client.WithIOTimeout(2*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if m.Session() == "" {
		t.Fatal("no session on a cluster")
	}
	return m
}

// result is what an acquire in a goroutine returned.
type result struct {
	g   client.Grant
	err error
}

// acquireAsync runs m.Acquire(key) in a goroutine.
func acquireAsync(m *client.Mux, key string) chan result {
	ch := make(chan result, 1)
	go func() {
		g, err := m.Acquire(context.Background(), key, 30*time.Second, 30*time.Second)
		ch <- result{g, err}
	}()
	return ch
}

// awaitGrant returns the grant of an acquire that must succeed.
func awaitGrant(t *testing.T, ch chan result, who string) client.Grant {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", who, r.err)
		}
		return r.g
	case <-time.After(40 * time.Second): // a guard against a hang, not a bound
		t.Fatalf("%s: no answer", who)
	}
	return client.Grant{}
}

// TestMuxWaitKeepsPlaceThroughFailover: a Mux acting for a session waits
// for a held key, a second Mux queues behind it, and the leader crashes.
// Each Mux dials the new leader and sends its acquire again with its
// request id, which takes over its place: when the holder releases, the
// first waiter's Acquire returns the grant (its caller never sees the
// failover) while the second still waits; the second is granted when the
// first releases. Fences rise, and nothing is left held.
func TestMuxWaitKeepsPlaceThroughFailover(t *testing.T) {
	r := startMuxRig(t)
	li := r.c.Leader(servertest.LeaderTimeout)
	ctx := context.Background()
	h, m, w2 := dialMux(t, r.addrs), dialMux(t, r.addrs), dialMux(t, r.addrs)
	hg, err := h.Acquire(ctx, "k", 0, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mch := acquireAsync(m, "k")
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "k").Waiters == 1 }, "first waiter queued")
	wch := acquireAsync(w2, "k")
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "k").Waiters == 2 }, "second waiter queued")

	r.c.Crash(li)
	ni := r.c.Leader(servertest.LeaderTimeout)
	if ni == li {
		t.Fatal("no new leader")
	}
	if err := h.Release(ctx, "k", hg.Token); err != nil {
		t.Fatalf("holder's release on the new leader: %v", err)
	}
	mg := awaitGrant(t, mch, "first waiter")
	select {
	case res := <-wch:
		t.Fatalf("second waiter answered before the first released: %+v", res)
	default:
	}
	if l := r.lock(ni, "k"); l.Waiters != 1 {
		t.Fatalf("after the first grant: %d waiters; want the second one", l.Waiters)
	}
	if err := m.Release(ctx, "k", mg.Token); err != nil {
		t.Fatal(err)
	}
	wg := awaitGrant(t, wch, "second waiter")
	if f0, f1, f2 := fenceOf(t, hg.Token), fenceOf(t, mg.Token), fenceOf(t, wg.Token); f1 <= f0 || f2 <= f1 {
		t.Fatalf("fences %d, %d, %d; want rising", f0, f1, f2)
	}
	if err := w2.Release(ctx, "k", wg.Token); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(ni, "k").Waiters == -1 }, "the key free at the end")
}

// gate is a dialer whose connections the test can break, and which
// refuses new ones while shut.
type gate struct {
	mu    sync.Mutex
	shut  bool
	mute  bool // writes are dropped: they never reach the server
	deaf  bool // reads are dropped: answers never reach the client
	conns []net.Conn
}

// gatedConn is a connection through a gate.
type gatedConn struct {
	net.Conn
	g *gate
}

func (c gatedConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		c.g.mu.Lock()
		deaf := c.g.deaf
		c.g.mu.Unlock()
		if !deaf || err != nil {
			return n, err
		}
	}
}

func (c gatedConn) Write(b []byte) (int, error) {
	c.g.mu.Lock()
	mute := c.g.mute
	c.g.mu.Unlock()
	if mute {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (g *gate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		return nil, errors.New("gate shut")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	g.conns = append(g.conns, c)
	return gatedConn{c, g}, nil
}

// deafen drops what the connections read from now on, until cut.
func (g *gate) deafen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deaf = true
}

// silence drops what is written on the connections from now on, until cut.
func (g *gate) silence() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mute = true
}

// cut breaks every connection and refuses new ones until open.
func (g *gate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut, g.mute, g.deaf = true, false, false
	for _, c := range g.conns {
		_ = c.Close()
	}
	g.conns = nil
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = false
}

// startGated starts a rig, and on its leader a Mux h holding key (its
// grant hg) and a Mux m whose connections go through the gate gt.
func startGated(t *testing.T, key string) (r *muxRig, li int, gt *gate, h, m *client.Mux, hg client.Grant) {
	r = startMuxRig(t)
	li = r.c.Leader(servertest.LeaderTimeout)
	lead := []string{r.addrs[li]}
	gt = new(gate)
	h, m = dialMux(t, lead), dialMux(t, lead, client.WithDialer(gt.dial))
	hg, err := h.Acquire(context.Background(), key, 0, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r, li, gt, h, m, hg
}

// TestMuxRetryTakesOverGrant: a Mux's wait is granted while its
// connection is down (the grant belongs to its session). When the Mux
// connects again, its acquire, sent again with its request id, returns
// that grant: the token made while it was away, not a new one, and the
// key is free once it releases it (no orphan grant).
func TestMuxRetryTakesOverGrant(t *testing.T) {
	r, li, gt, h, m, hg := startGated(t, "k")
	ctx := context.Background()
	mch := acquireAsync(m, "k")
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "k").Waiters == 1 }, "waiter queued")
	gt.cut()
	if err := h.Release(ctx, "k", hg.Token); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { l := r.lock(li, "k"); return l.Waiters == 0 }, "granted to the session")
	gt.open()
	mg := awaitGrant(t, mch, "waiter")
	if f0, f1 := fenceOf(t, hg.Token), fenceOf(t, mg.Token); f1 != f0+1 {
		t.Fatalf("fence %d after the holder's %d; want the grant made while away (%d)", f1, f0, f0+1)
	}
	if err := m.Release(ctx, "k", mg.Token); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "k").Waiters == -1 }, "the key free after the release")
}

// TestMuxRetryTakesOverSet: as TestMuxRetryTakesOverGrant for a set: the
// set is granted while the Mux's connection is down, and AcquireMany
// returns those grants (their tokens) once it is back.
func TestMuxRetryTakesOverSet(t *testing.T) {
	r, li, gt, h, m, hg := startGated(t, "b")
	ctx := context.Background()
	ch := make(chan []client.Grant, 1)
	go func() {
		gs, err := m.AcquireMany(ctx, []string{"a", "b"}, 30*time.Second, 30*time.Second)
		if err != nil {
			t.Errorf("AcquireMany: %v", err)
		}
		ch <- gs
	}()
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "b").Waiters == 1 }, "set queued")
	gt.cut()
	if err := h.Release(ctx, "b", hg.Token); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		return r.lock(li, "a").Waiters == 0 && r.lock(li, "b").Waiters == 0
	}, "set granted to the session")
	gt.open()
	var gs []client.Grant
	select {
	case gs = <-ch:
	case <-time.After(40 * time.Second): // a guard against a hang, not a bound
		t.Fatal("AcquireMany: no answer")
	}
	if len(gs) != 2 {
		t.Fatalf("grants %v", gs)
	}
	for _, g := range gs {
		// The set's two grants were the next fences after the holder's.
		if f0, f := fenceOf(t, hg.Token), fenceOf(t, g.Token); f != f0+1 && f != f0+2 {
			t.Fatalf("fence %d after the holder's %d; want the set granted while away", f, f0)
		}
	}
	for i, key := range []string{"a", "b"} {
		if err := m.Release(ctx, key, gs[i].Token); err != nil {
			t.Fatalf("release %s: %v", key, err)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		return r.lock(li, "a").Waiters == -1 && r.lock(li, "b").Waiters == -1
	}, "both keys free after the releases")
}

// waitingAcquire starts m.Acquire(key) under a context the caller may
// cancel, and returns once it waits in key's queue on member li.
func waitingAcquire(t *testing.T, r *muxRig, li int, m *client.Mux, key string) (context.CancelFunc, chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, key, 30*time.Second, 30*time.Second)
		ch <- err
	}()
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, key).Waiters == 1 }, "waiter queued")
	return cancel, ch
}

// TestMuxCancelWhileReconnecting: a caller's context ends while its
// acquire waits for the Mux to connect again. The Mux withdraws the wait
// on its next connection, after taking over what the first attempt got:
// the key, released by its holder meanwhile, ends free, not held for the
// session.
func TestMuxCancelWhileReconnecting(t *testing.T) {
	r, li, gt, h, m, hg := startGated(t, "k")
	cancel, ch := waitingAcquire(t, r, li, m, "k")
	gt.cut()
	if err := h.Release(context.Background(), "k", hg.Token); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "k").Waiters == 0 }, "granted to the session")
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled acquire: %v", err)
	}
	gt.open()
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "k").Waiters == -1 }, "the grant made while away released")
}

// TestMuxLostCancelSentAgain: a caller's context ends while its acquire
// waits, and the cancel the Mux sends for it is lost (written, never
// read: the connection then breaks). The Mux sends the cancel again on
// its next connection, so the wait leaves the queue: when the holder
// releases, the key is free, not granted to the session for nobody.
func TestMuxLostCancelSentAgain(t *testing.T) {
	r, li, gt, h, m, hg := startGated(t, "k")
	cancel, ch := waitingAcquire(t, r, li, m, "k")
	gt.silence()
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled acquire: %v", err)
	}
	gt.cut()
	gt.open()
	testutil.Eventually(t, 20*time.Second, func() bool { return r.lock(li, "k").Waiters == 0 }, "the wait withdrawn")
	if err := h.Release(context.Background(), "k", hg.Token); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "k").Waiters == -1 }, "the key free")
}

// TestMuxAbandonedEnqueueWithdrawn: a caller's context ends before the
// answer to its enqueue arrives (answers are lost on the way), though the
// server queued it. The Mux withdraws what the enqueue queued (a wait
// with timeout 0 on the key), so it is not granted later to the session
// for nobody: once the holder releases, the key is free.
func TestMuxAbandonedEnqueueWithdrawn(t *testing.T) {
	r, li, gt, h, m, hg := startGated(t, "k")
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	gt.deafen()
	go func() {
		_, _, err := m.Enqueue(ctx, "k", 30*time.Second)
		ch <- err
	}()
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "k").Waiters == 1 }, "enqueued")
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled enqueue: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "k").Waiters == 0 }, "the enqueue withdrawn")
	gt.cut()
	gt.open()
	if err := h.Release(context.Background(), "k", hg.Token); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return r.lock(li, "k").Waiters == -1 }, "the key free")
}
