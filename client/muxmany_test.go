package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// heldBy returns the owner holding the lock key, 0 for none.
func heldBy(srv *servertest.Server, key string) uint64 {
	for _, l := range srv.Engine.Snapshot(time.Now().UnixNano()).Locks {
		if l.Key == key {
			return l.OwnerConnID
		}
	}
	return 0
}

type manyResult struct {
	gs  []client.Grant
	err error
}

// TestMuxAcquireManyCrossing: two goroutines' crossing sets ({a,b} and
// {b,a}) and a single-key waiter share one Mux connection. Nothing waits
// in a cycle, each set is granted all or none, the single acquire of a
// that queued after the sets is granted after both (FIFO per key), and a
// free key is granted at once while they all wait.
func TestMuxAcquireManyCrossing(t *testing.T) {
	ctx := context.Background()
	srv, m, p := muxAndConn(t, 1)
	gb, err := p.Acquire(ctx, "b", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	many := func(keys ...string) chan manyResult {
		ch := make(chan manyResult, 1)
		go func() {
			gs, err := m.AcquireMany(ctx, keys, time.Minute, 0)
			ch <- manyResult{gs, err}
		}()
		return ch
	}
	first := many("a", "b")
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "b") == 1 }, "first set queued")
	second := many("b", "a")
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "b") == 2 }, "second set queued")
	single := make(chan error, 1)
	go func() { _, err := m.Acquire(ctx, "a", time.Minute, 0); single <- err }()
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "a") == 3 }, "single acquire queued")
	if heldBy(srv, "a") != 0 {
		t.Fatal("a waiting set holds a key")
	}
	if _, err := m.Acquire(ctx, "free", 0, 0); err != nil {
		t.Fatalf("acquire of a free key behind waiting sets: %v", err)
	}
	if err := p.Release(ctx, "b", gb.Token); err != nil {
		t.Fatal(err)
	}
	r1 := <-first
	if r1.err != nil || len(r1.gs) != 2 {
		t.Fatalf("first set = %v, %v", r1.gs, r1.err)
	}
	if fenceOf(t, r1.gs[1].Token) <= fenceOf(t, gb.Token) {
		t.Fatal("the set's fence on b is not above the last holder's")
	}
	if len(second) != 0 || len(single) != 0 {
		t.Fatal("granted while the first set holds its keys")
	}
	for i, k := range []string{"a", "b"} {
		if err := m.Release(ctx, k, r1.gs[i].Token); err != nil {
			t.Fatal(err)
		}
	}
	r2 := <-second
	if r2.err != nil || len(r2.gs) != 2 {
		t.Fatalf("second set = %v, %v", r2.gs, r2.err)
	}
	if len(single) != 0 {
		t.Fatal("the single acquire overtook the second set on a")
	}
	if fenceOf(t, r2.gs[1].Token) <= fenceOf(t, r1.gs[0].Token) {
		t.Fatal("the second set's fence on a is not above the first's")
	}
	for i, k := range []string{"b", "a"} {
		if err := m.Release(ctx, k, r2.gs[i].Token); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-single; err != nil {
		t.Fatalf("single acquire: %v", err)
	}
}

func fenceOf(t *testing.T, tok string) uint64 {
	t.Helper()
	f, err := fence.ParseString(tok)
	if err != nil {
		t.Fatal(err)
	}
	return f.Fence
}

// TestMuxAcquireManyTimeoutAndCancel: a set that times out over a Mux
// returns ErrTimeout and leaves every key's queue; one whose context is
// canceled returns at once, and keeps none of its keys: each is free once
// its holder releases it.
func TestMuxAcquireManyTimeoutAndCancel(t *testing.T) {
	ctx := context.Background()
	srv, m, p := muxAndConn(t, 2)
	gy, err := p.Acquire(ctx, "y", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AcquireMany(ctx, []string{"x", "y"}, time.Second, 0); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("timed-out set = %v; want ErrTimeout", err)
	}
	if waitersOn(srv, "y") != 0 || heldBy(srv, "x") != 0 {
		t.Fatal("a timed-out set left a queue entry or a hold")
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := m.SemAcquireMany(cctx, []string{"x", "y"}, 1, time.Minute, 0)
		done <- err
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "y") == 1 }, "the set queued")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled set = %v", err)
	}
	if err := p.Release(ctx, "y", gy.Token); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return heldBy(srv, "x") == 0 && heldBy(srv, "y") == 0 },
		"the abandoned set's grant released, every key")
}

// TestMultiLockOverMux: a MultiLock with its Mux set takes and releases
// its keys over the Mux.
func TestMultiLockOverMux(t *testing.T) {
	srv := servertest.StartServer(t, orphanTTL(5*time.Second))
	ctx := context.Background()
	m, err := client.DialMux(ctx, []string{srv.Addr}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ml := &client.MultiLock{Keys: []string{"m1", "m2", "m3"}, AcquireTimeout: 5 * time.Second, Mux: m}
	if ok, err := ml.Acquire(ctx); !ok || err != nil {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	if len(ml.Tokens()) != 3 || !ml.Held() {
		t.Fatalf("tokens %v held %v", ml.Tokens(), ml.Held())
	}
	owner := heldBy(srv, "m1")
	if owner == 0 || heldBy(srv, "m2") != owner || heldBy(srv, "m3") != owner {
		t.Fatal("the set is not held by one owner (the Mux's session)")
	}
	if err := ml.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if heldBy(srv, "m1") != 0 || heldBy(srv, "m2") != 0 || heldBy(srv, "m3") != 0 {
		t.Fatal("released set still held")
	}
}

// muxAndConn starts a server and dials a Mux of n connections and a plain
// connection to it, all closed when the test ends.
func muxAndConn(t *testing.T, n int) (*servertest.Server, *client.Mux, *client.Conn) {
	t.Helper()
	srv := servertest.StartServer(t)
	m, err := client.DialMux(context.Background(), []string{srv.Addr}, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	p, err := client.Dial(context.Background(), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return srv, m, p
}
