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

func TestMultiLockAcquireRelease(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx := context.Background()
	a := &client.MultiLock{Keys: []string{"inv", "pay"}, LeaseTTL: 2, Servers: []string{srv.Addr}}
	if got, err := a.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	f := a.Fences()
	if len(f) != 2 || f[0] == 0 || f[0] == f[1] || len(a.Tokens()) != 2 || !a.Held() {
		t.Fatalf("fences %v tokens %v held %v", f, a.Tokens(), a.Held())
	}
	// A crossing set waits; a single lock on one of the keys is refused.
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AcquireMany(ctx, []string{"pay", "inv"}, 0, 0); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("crossing set while held: %v", err)
	}
	if _, err := c.Acquire(ctx, "pay", 0, 0); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("single on a held key: %v", err)
	}
	// The leases outlive their 2 s TTL: the set is renewed.
	done := make(chan []client.Grant, 1)
	go func() {
		gs, err := c.AcquireMany(ctx, []string{"pay", "inv"}, 20*time.Second, 0)
		if err != nil {
			t.Error(err)
		}
		done <- gs
	}()
	select {
	case <-a.Lost():
		t.Fatalf("lost: %v", a.Err())
	case <-time.After(3 * time.Second): // longer than the TTL: renewal is what keeps it
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	gs := <-done
	if len(gs) != 2 || gs[0].Fence() <= max(f[0], f[1]) {
		t.Fatalf("crossing set after release: %v", gs)
	}
	if err := a.Release(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("second Release = %v", err)
	}
	for i, k := range []string{"pay", "inv"} {
		if err := c.Release(ctx, k, gs[i].Token); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AcquireMany(ctx, []string{"x", "x"}, 0, 0); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("repeated key: %v", err)
	}
	s := &client.MultiLock{Keys: []string{"s1", "s2"}, Limit: 2, Servers: []string{srv.Addr}}
	if got, err := s.Acquire(ctx); !got || err != nil {
		t.Fatalf("semaphore set: %v %v", got, err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMultiLockLost: when the server drops the set's leases, Lost closes.
func TestMultiLockLost(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx := context.Background()
	a := &client.MultiLock{Keys: []string{"a", "b"}, LeaseTTL: 2, Servers: []string{srv.Addr}}
	if got, err := a.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	// Someone releases b with its token: the next renewal fails.
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Release(ctx, "b", a.Tokens()[1]); err != nil {
		t.Fatal(err)
	}
	if !lost(a.Lost(), 10*time.Second) {
		t.Fatal("set not lost after a key was taken away")
	}
	if err := a.Release(ctx); !errors.Is(err, client.ErrLost) {
		t.Fatalf("Release after loss = %v", err)
	}
}

// TestMultiLockCluster: a MultiLock over a Cluster holds its set through
// a failover: the new leader keeps every key, renewed by its token.
func TestMultiLockCluster(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	var seeds []string
	for _, m := range c.Members() {
		seeds = append(seeds, m.Addr)
	}
	ctx := context.Background()
	m := &client.MultiLock{Keys: []string{"c1", "c2"}, LeaseTTL: 20, Cluster: seeds}
	if got, err := m.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	ms := c.Members()
	testutil.Eventually(t, 30*time.Second, func() bool {
		for i, x := range c.Members() {
			if i != li && x.Node.FSM().AppliedIndex() < ms[li].Node.FSM().AppliedIndex() {
				return false
			}
		}
		return true
	}, "followers did not catch up")
	c.Stop(li)
	nl := c.Leader(servertest.LeaderTimeout)
	cl, err := client.Dial(ctx, c.Members()[nl].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.AcquireMany(ctx, []string{"c2", "c1"}, 0, 0); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("set after failover: %v", err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatalf("Release on the new leader: %v", err)
	}
	if _, err := cl.AcquireMany(ctx, []string{"c2", "c1"}, 0, 0); err != nil {
		t.Fatalf("set after release: %v", err)
	}
}
