package client_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// lost waits up to d for ch to close.
func lost(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func TestLockAcquireRelease(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx := context.Background()
	a := &client.Lock{Key: "deploy", LeaseTTL: 10, Servers: []string{srv.Addr}}
	b := &client.Lock{Key: "deploy", Servers: []string{srv.Addr}}

	if got, err := a.Acquire(ctx); !got || err != nil {
		t.Fatalf("a.Acquire = %v, %v; want true", got, err)
	}
	if f, err := client.FenceFromToken(a.Token()); err != nil || f != a.Fence() || f == 0 {
		t.Fatalf("FenceFromToken(%q) = %d, %v; want %d", a.Token(), f, err, a.Fence())
	}
	if _, err := a.Acquire(ctx); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("second a.Acquire = %v, want ErrHeld", err)
	}
	if got, err := b.Acquire(ctx); got || err != nil {
		t.Fatalf("b.Acquire while held = %v, %v; want false, nil", got, err)
	}
	if got, err := b.Enqueue(ctx); got || err != nil {
		t.Fatalf("b.Enqueue while held = %v, %v; want false, nil", got, err)
	}
	first := a.Fence()
	if err := a.Release(ctx); err != nil {
		t.Fatalf("a.Release: %v", err)
	}
	if a.Token() != "" || a.Held() {
		t.Fatalf("after Release: token %q, held %v", a.Token(), a.Held())
	}
	if err := a.Release(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("second a.Release = %v, want ErrNotHeld", err)
	}
	if got, err := b.Wait(ctx, 5*time.Second); !got || err != nil {
		t.Fatalf("b.Wait = %v, %v; want true", got, err)
	}
	if b.Fence() <= first {
		t.Fatalf("b's fence %d not above a's %d", b.Fence(), first)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("b.Release: %v", err)
	}
	if _, err := b.Wait(ctx, time.Second); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("Wait without Enqueue = %v, want ErrNotHeld", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "deploy") == -1 }, "lock freed")
}

func TestLockRenewalKeepsLease(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx := context.Background()
	holder := &client.Lock{Key: "renewed", LeaseTTL: 2, Servers: []string{srv.Addr}}
	if got, err := holder.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	// The rival waits in the queue for 5 s: 2.5 leases. Only renewal can
	// keep it out that long.
	rival := dial(t, srv.Addr)
	start := time.Now()
	if _, err := rival.Acquire(ctx, "renewed", 5*time.Second, 0); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("rival Acquire after %v = %v; want ErrTimeout", time.Since(start), err)
	}
	if !holder.Held() || holder.Err() != nil {
		t.Fatalf("holder lost the lease: %v", holder.Err())
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := rival.Acquire(ctx, "renewed", 0, 0); err != nil {
		t.Fatalf("rival Acquire after Release = %v", err)
	}
}

func TestLockLostWhenStolen(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx := context.Background()
	l := &client.Lock{Key: "stolen", LeaseTTL: 2, Servers: []string{srv.Addr}}
	watch := l.Lost() // before the grant: the next grant's channel
	if got, err := l.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	// Anyone with the token can release the lease; the next renewal finds
	// it gone.
	if err := dial(t, srv.Addr).Release(ctx, "stolen", l.Token()); err != nil {
		t.Fatalf("steal: %v", err)
	}
	if !lost(watch, 5*time.Second) {
		t.Fatal("Lost not closed 5s after the lease was released elsewhere")
	}
	if l.Held() || !errors.Is(l.Err(), client.ErrNotHolder) {
		t.Fatalf("Held %v, Err %v; want false, ErrNotHolder", l.Held(), l.Err())
	}
	if err := l.Release(ctx); !errors.Is(err, client.ErrLost) {
		t.Fatalf("Release after loss = %v, want ErrLost", err)
	}
	if got, err := l.Acquire(ctx); !got || err != nil {
		t.Fatalf("re-Acquire = %v, %v", got, err)
	}
	if lost(l.Lost(), 0) {
		t.Fatal("a new grant reports the old grant's loss")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestLockLostWhenRenewalBlocked(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx := context.Background()
	zombie := &client.Lock{Key: "paused", LeaseTTL: 1, Servers: []string{srv.Addr}}
	// A paused process: the renewal does not run until the lease is over.
	client.SetRenewHook(zombie, func(ctx context.Context) { <-ctx.Done() })
	if got, err := zombie.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	next := &client.Lock{Key: "paused", AcquireTimeout: 5 * time.Second, LeaseTTL: 10, Servers: []string{srv.Addr}}
	if got, err := next.Acquire(ctx); !got || err != nil {
		t.Fatalf("successor Acquire = %v, %v; want the expired lease", got, err)
	}
	if !lost(zombie.Lost(), 5*time.Second) {
		t.Fatal("Lost not closed after the lease expired")
	}
	if !errors.Is(zombie.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want the local lease deadline", zombie.Err())
	}
	if next.Fence() <= zombie.Fence() {
		t.Fatalf("successor fence %d not above the zombie's %d", next.Fence(), zombie.Fence())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestLockLostWhenServerStops(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	l := &client.Lock{Key: "doomed", LeaseTTL: 2, Servers: []string{srv.Addr}}
	if got, err := l.Acquire(context.Background()); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.TCP.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !lost(l.Lost(), 5*time.Second) {
		t.Fatal("Lost not closed 5s after the server stopped")
	}
	if l.Err() == nil || l.Held() {
		t.Fatalf("Err %v, Held %v; want an error and false", l.Err(), l.Held())
	}
}

func TestLockCancelAcquire(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	holder := &client.Lock{Key: "contended", Servers: []string{srv.Addr}}
	if got, err := holder.Acquire(context.Background()); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	waiter := &client.Lock{Key: "contended", AcquireTimeout: time.Minute, Servers: []string{srv.Addr}}
	go func() {
		_, err := waiter.Acquire(ctx)
		errc <- err
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "contended") == 1 }, "waiter queued")
	cancel()
	select { // the wait would otherwise last a minute
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("canceled Acquire still blocked after 10 s")
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "contended") == 0 }, "wait withdrawn")
	if waiter.Held() || waiter.Token() != "" {
		t.Fatal("canceled waiter holds")
	}
}

func TestSemaphoreLimit(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx := context.Background()
	sem := func() *client.Semaphore {
		return &client.Semaphore{Key: "pool", Limit: 2, LeaseTTL: 10, Servers: []string{srv.Addr}}
	}
	s1, s2, s3 := sem(), sem(), sem()
	for i, s := range []*client.Semaphore{s1, s2} {
		if got, err := s.Acquire(ctx); !got || err != nil {
			t.Fatalf("slot %d: Acquire = %v, %v", i+1, got, err)
		}
	}
	if got, err := s3.Acquire(ctx); got || err != nil {
		t.Fatalf("third Acquire = %v, %v; want false (full)", got, err)
	}
	wrong := &client.Semaphore{Key: "pool", Limit: 3, Servers: []string{srv.Addr}}
	if _, err := wrong.Acquire(ctx); !errors.Is(err, client.ErrLimitMismatch) {
		t.Fatalf("Acquire with limit 3 = %v, want ErrLimitMismatch", err)
	}
	if got, err := s3.Enqueue(ctx); got || err != nil {
		t.Fatalf("third Enqueue = %v, %v; want queued", got, err)
	}
	f1 := s1.Fence()
	if err := s1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := s3.Wait(ctx, 5*time.Second); !got || err != nil {
		t.Fatalf("third Wait = %v, %v; want the freed slot", got, err)
	}
	if s3.Fence() <= s2.Fence() || s2.Fence() <= f1 {
		t.Fatalf("fences %d, %d, %d not increasing", f1, s2.Fence(), s3.Fence())
	}
	for _, s := range []*client.Semaphore{s2, s3} {
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLockSharding(t *testing.T) {
	t.Parallel()
	srvs := []*servertest.Server{servertest.StartServer(t), servertest.StartServer(t)}
	addrs := []string{srvs[0].Addr, srvs[1].Addr}
	ctx := context.Background()
	used := [2]int{}
	for i := range 8 {
		key := fmt.Sprintf("shard-%d", i)
		want := int(crc32.ChecksumIEEE([]byte(key)) % 2)
		if got := client.ServerFor(addrs, key); got != addrs[want] {
			t.Fatalf("ServerFor(%q) = %s, want %s", key, got, addrs[want])
		}
		l := &client.Lock{Key: key, LeaseTTL: 10, Servers: addrs}
		if got, err := l.Acquire(ctx); !got || err != nil {
			t.Fatalf("Acquire(%q) = %v, %v", key, got, err)
		}
		if waitersOn(srvs[want], key) != 0 || waitersOn(srvs[1-want], key) != -1 {
			t.Fatalf("key %q: held on server %d? %v; on server %d? %v; want only %d",
				key, want, waitersOn(srvs[want], key) == 0, 1-want, waitersOn(srvs[1-want], key) == 0, want)
		}
		used[want]++
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if used[0] == 0 || used[1] == 0 {
		t.Fatalf("keys per server = %v; the test needs keys on both", used)
	}
}
