package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

func TestRWLock(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx := context.Background()
	addr := []string{srv.Addr}
	r1 := &client.RWLock{Key: "cfg", LeaseTTL: 2, Servers: addr}
	r2 := &client.RWLock{Key: "cfg", Servers: addr}
	w := &client.RWLock{Key: "cfg", Servers: addr, AcquireTimeout: 10 * time.Second}
	for _, r := range []*client.RWLock{r1, r2} {
		if got, err := r.RLock(ctx); !got || err != nil {
			t.Fatalf("RLock = %v, %v", got, err)
		}
	}
	if _, err := r1.RLock(ctx); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("second RLock = %v, want ErrHeld", err)
	}
	if got, err := (&client.RWLock{Key: "cfg", Servers: addr}).Lock(ctx); got || err != nil {
		t.Fatalf("try-Lock over readers = %v, %v; want false", got, err)
	}
	if got, err := (&client.Lock{Key: "cfg", Servers: addr}).Acquire(ctx); got || !errors.Is(err, client.ErrLimitMismatch) {
		t.Fatalf("Lock.Acquire on a read-write key = %v, %v; want ErrLimitMismatch", got, err)
	}
	// A writer waits 4 s, two leases of the readers: only renewal keeps
	// them holding that long.
	late := &client.RWLock{Key: "cfg", Servers: addr, AcquireTimeout: 4 * time.Second}
	if got, err := late.Lock(ctx); got || err != nil {
		t.Fatalf("Lock over renewed readers = %v, %v; want a timeout", got, err)
	}
	if !r1.Held() || r1.Err() != nil {
		t.Fatalf("reader lost its lease: %v", r1.Err())
	}
	done := make(chan error, 1)
	go func() {
		got, err := w.Lock(ctx)
		if err == nil && !got {
			err = errors.New("timed out")
		}
		done <- err
	}()
	testutil.Eventually(t, 5*time.Second, func() bool {
		st := srv.Engine.Snapshot(0).RWLocks
		return len(st) == 1 && st[0].WritersWaiting == 1
	}, "writer queued")
	last := max(r1.Fence(), r2.Fence())
	for _, r := range []*client.RWLock{r1, r2} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if w.Fence() <= last {
		t.Fatalf("writer fence %d not above the readers' %d", w.Fence(), last)
	}
	if got, err := r1.REnqueue(ctx); got || err != nil {
		t.Fatalf("REnqueue under a writer = %v, %v; want queued", got, err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := r1.Wait(ctx, 5*time.Second); !got || err != nil || r1.Fence() <= w.Fence() {
		t.Fatalf("Wait = %v, %v (fence %d after %d)", got, err, r1.Fence(), w.Fence())
	}
}
