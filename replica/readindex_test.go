package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
)

// A write the leader acknowledged is in a follower's state once a read
// barrier on the follower returns.
//
// A follower that knows no leader fails a barrier at once (documented):
// one that has not heard from the new leader yet (only a quorum need
// have acknowledged the write), or whose election timeout passed on a
// loaded machine. Its barrier is tried again until one returns.
func TestReadBarrierFollowerSeesLeaderWrite(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	for i := range 20 {
		key := fmt.Sprint("rb", i)
		owner := engine.OwnerID(100 + i)
		out, err := l.Acquire(ctxT(t, 5*time.Second), engine.AcquireReq{Key: []byte(key), Owner: owner, Limit: 1, TTL: time.Minute}, nil)
		if err != nil || out.Result != engine.Granted {
			t.Fatalf("Acquire %s = %v, %v; want granted", key, out.Result, err)
		}
		for _, f := range c.nodes {
			barrier(t, f)
			if h, ok := lockHolder(f, key, clock.Now()); !ok || h.OwnerConnID != uint64(owner) {
				t.Fatalf("%s after ReadBarrier: %s held by %+v (%v); want owner %d", f.ID(), key, h, ok, owner)
			}
		}
	}
}

// barrier runs a read barrier on n until one returns, again while n knows
// no leader (the barrier fails at once then); any other error fails t.
func barrier(t *testing.T, n *Node) {
	t.Helper()
	var err error
	poll(t, 10*time.Second, n.ID()+" read barrier returning", func() bool {
		err = n.ReadBarrier(ctxT(t, 5*time.Second))
		if err != nil && !errors.Is(err, ErrNotLeader) {
			t.Fatalf("%s: ReadBarrier: %v", n.ID(), err)
		}
		return err == nil
	}, func() string { return fmt.Sprint("the last failed: ", err) })
}

// Barriers that run at once on a follower all return, and leave no round
// behind.
func TestReadBarrierConcurrent(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	var f *Node
	for _, n := range c.nodes {
		if n != l {
			f = n
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() { errs <- f.ReadBarrier(ctxT(t, 5*time.Second)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("ReadBarrier: %v", err)
		}
	}
	f.reads.mu.Lock()
	defer f.reads.mu.Unlock()
	if len(f.reads.sent) != 0 || len(f.reads.parked) != 0 || f.reads.next != nil {
		t.Fatalf("rounds left: %d sent, %d parked, open %v", len(f.reads.sent), len(f.reads.parked), f.reads.next != nil)
	}
}

// A node cut off from the others fails a read barrier within its bound,
// whether it was a follower or the leader; it never answers as if its
// state were current. The rounds it gave up on are forgotten.
func TestReadBarrierIsolatedFails(t *testing.T) {
	for _, which := range []string{"follower", "leader"} {
		t.Run(which, func(t *testing.T) {
			c := newCluster(t, 3, nil)
			l := c.leader(t)
			i := c.index(l)
			if which == "follower" {
				i = (i + 1) % 3
			}
			n := c.nodes[i]
			c.isolate(i)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := n.ReadBarrier(ctx)
			var nl *NotLeaderError
			if !errors.As(err, &nl) && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("ReadBarrier on the isolated %s = %v; want not leader or a deadline", which, err)
			}
			var bnl *backend.NotLeaderError
			if berr := n.Barrier(ctxT(t, time.Second)); !errors.As(berr, &bnl) && !errors.Is(berr, context.DeadlineExceeded) {
				t.Fatalf("Barrier on the isolated %s = %v; want not leader or a deadline", which, berr)
			}
			n.reads.mu.Lock()
			left := len(n.reads.sent) + len(n.reads.parked)
			n.reads.mu.Unlock()
			if left != 0 {
				t.Fatalf("%d rounds left after the barriers gave up", left)
			}
			c.connectAll()
			poll(t, 10*time.Second, "a read barrier after healing", func() bool {
				return n.ReadBarrier(ctxT(t, time.Second)) == nil
			})
		})
	}
}

// A single-voter cluster confirms its own reads at once; a stopped node
// refuses them.
func TestReadBarrierSingleNode(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.leader(t)
	for range 3 {
		if err := n.ReadBarrier(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("ReadBarrier: %v", err)
		}
	}
	c.kill(t, 0)
	if err := n.ReadBarrier(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadBarrier after Shutdown = %v; want ErrClosed", err)
	}
	var nl *backend.NotLeaderError
	if err := n.Barrier(context.Background()); !errors.As(err, &nl) {
		t.Fatalf("Barrier after Shutdown = %v; want *backend.NotLeaderError", err)
	}
}
