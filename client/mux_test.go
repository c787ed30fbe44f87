package client_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// orphanTTL gives a test server sessions with the orphan TTL d.
func orphanTTL(d time.Duration) servertest.Option {
	return func(_ *engine.Config, c *server.Config) { c.OrphanTTL = d }
}

// breaker is a dialer whose connections the test can break.
type breaker struct {
	mu    sync.Mutex
	conns []net.Conn
	dials atomic.Int32
}

func (b *breaker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err == nil {
		b.dials.Add(1)
		b.mu.Lock()
		b.conns = append(b.conns, c)
		b.mu.Unlock()
	}
	return c, err
}

func (b *breaker) breakAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
}

// TestMuxManyGoroutines: 40 goroutines' Locks share two connections; on
// one hot key they take turns (never two holders at once), and on their
// own keys they all get theirs.
func TestMuxManyGoroutines(t *testing.T) {
	srv := servertest.StartServer(t, orphanTTL(2*time.Second))
	ctx := context.Background()
	m, err := client.DialMux(ctx, []string{srv.Addr}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.Session()) != 32 {
		t.Fatalf("session %q; want one", m.Session())
	}
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 80)
	for i := range 40 {
		wg.Go(func() {
			hot := &client.Lock{Key: "hot", AcquireTimeout: 30 * time.Second, Mux: m}
			own := &client.Semaphore{Key: "own" + string(rune('a'+i)), Limit: 2, Mux: m}
			for _, l := range []interface {
				Acquire(context.Context) (bool, error)
				Release(context.Context) error
			}{hot, own} {
				ok, err := l.Acquire(ctx)
				if !ok || err != nil {
					errs <- err
					return
				}
				if l == hot {
					n := inside.Add(1)
					for o := most.Load(); n > o && !most.CompareAndSwap(o, n); o = most.Load() {
					}
					inside.Add(-1)
				}
				if err := l.Release(ctx); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("lock: %v", err)
	}
	if most.Load() != 1 {
		t.Fatalf("%d holders of the hot key at once", most.Load())
	}
}

// TestMuxWaitHoldsBackNothing: over one connection, an acquire waiting for
// a held key does not delay another goroutine's acquire of a free key.
func TestMuxWaitHoldsBackNothing(t *testing.T) {
	srv := servertest.StartServer(t)
	ctx := context.Background()
	m, err := client.DialMux(ctx, []string{srv.Addr}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g, err := m.Acquire(ctx, "k", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, "k", time.Minute, 0)
		waited <- err
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "k") == 1 }, "the wait queued")
	if _, err := m.Acquire(ctx, "k2", 0, 0); err != nil {
		t.Fatalf("acquire behind a wait: %v", err)
	}
	if err := m.Release(ctx, "k", g.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the wait: %v", err)
	}
}

// TestMuxCanceledAcquireReleasesItsGrant: an acquire whose context ends
// while it waits keeps nothing of the key: once the holder releases, the
// next acquire gets it.
func TestMuxCanceledAcquireReleasesItsGrant(t *testing.T) {
	srv := servertest.StartServer(t)
	ctx := context.Background()
	m, err := client.DialMux(ctx, []string{srv.Addr}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g, _ := m.Acquire(ctx, "k", 0, 0)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := m.Acquire(cctx, "k", time.Minute, 0); done <- err }()
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "k") == 1 }, "the wait queued")
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("canceled acquire = %v", err)
	}
	if err := m.Release(ctx, "k", g.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(ctx, "k", 10*time.Second, 0); err != nil {
		t.Fatalf("the abandoned grant was kept: %v", err)
	}
}

// TestMuxReconnectKeepsLease: with a session, a broken connection is
// dialled again and the session attached: the Lock still holds, renews,
// and its Lost stays open.
func TestMuxReconnectKeepsLease(t *testing.T) {
	srv := servertest.StartServer(t, orphanTTL(5*time.Second))
	ctx := context.Background()
	var b breaker
	m, err := client.DialMux(ctx, []string{srv.Addr}, 1, client.WithDialer(b.dial))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l := &client.Lock{Key: "k", LeaseTTL: 2, Mux: m}
	if ok, err := l.Acquire(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	b.breakAll()
	testutil.Eventually(t, 10*time.Second, func() bool { return b.dials.Load() >= 2 }, "dialled again")
	if _, err := m.Renew(ctx, "k", l.Token(), 2*time.Second); err != nil {
		t.Fatalf("renew after the reconnect: %v", err)
	}
	if lost(l.Lost(), 1500*time.Millisecond) {
		t.Fatalf("lease lost: %v", l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMuxLostWithoutSession: without sessions a broken connection's locks
// are released by the server, and the Lock's Lost fires.
func TestMuxLostWithoutSession(t *testing.T) {
	srv := servertest.StartServer(t, orphanTTL(0))
	ctx := context.Background()
	var b breaker
	m, err := client.DialMux(ctx, []string{srv.Addr}, 1, client.WithDialer(b.dial))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Session() != "" {
		t.Fatalf("session %q without sessions", m.Session())
	}
	l := &client.Lock{Key: "k", LeaseTTL: 2, Mux: m}
	if ok, err := l.Acquire(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	b.breakAll()
	if !lost(l.Lost(), 10*time.Second) {
		t.Fatal("Lost did not fire")
	}
}

// TestMuxElection: two Elections on one Mux: one leads, the other waits in
// the queue without holding back the Mux, and leads once the first
// resigns.
func TestMuxElection(t *testing.T) {
	srv := servertest.StartServer(t)
	ctx := context.Background()
	m, err := client.DialMux(ctx, []string{srv.Addr}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a := &client.Election{Name: "leader", Mux: m}
	b := &client.Election{Name: "leader", Mux: m}
	if err := a.Campaign(ctx); err != nil || !a.Leading() {
		t.Fatalf("a.Campaign = %v, leading %v", err, a.Leading())
	}
	won := make(chan error, 1)
	go func() { won <- b.Campaign(ctx) }()
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "leader") == 1 }, "b queued")
	if _, err := m.Acquire(ctx, "other", 0, 0); err != nil {
		t.Fatalf("acquire beside a campaign: %v", err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil || !b.Leading() {
		t.Fatalf("b.Campaign = %v, leading %v", err, b.Leading())
	}
}

// TestMuxHomeConnSpreadsKeys checks that a Mux's keys spread over its
// connections, each key to one, including keys that differ only in their
// last characters (worker-0, worker-1, ...).
func TestMuxHomeConnSpreadsKeys(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		per := make([]int, n)
		for i := range 400 {
			key := "worker-" + strconv.Itoa(i)
			c := client.HomeConn(key, n)
			if c < 0 || c >= n {
				t.Fatalf("HomeConn(%q, %d) = %d, out of range", key, n, c)
			}
			if again := client.HomeConn(key, n); again != c {
				t.Fatalf("HomeConn(%q, %d) = %d, then %d", key, n, c, again)
			}
			per[c]++
		}
		for c, k := range per {
			if k < 400/n/4 { // a fair share is 400/n
				t.Errorf("%d connections: connection %d has %d of 400 keys, want at least %d (all: %v)", n, c, k, 400/n/4, per)
			}
		}
	}
}
