package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// TestFailoverKeepsPlaces is the failover target: on a 3-node cluster,
// clients hold and wait on a few keys through Cluster; the leader crashes
// (its node first, so nothing of its connections reaches the log). Every
// waiter's Acquire retries on the new leader with its request id and takes
// over its place: each client's grant comes in the order it queued (FIFO
// kept, no place lost), fences rise, every client gets exactly one grant,
// and nothing is left held or queued at the end (no orphan grant). It
// holds with TCP sessions (the clients take their sessions back within the
// orphan TTL) and without (--orphan-ttl 0: request ids alone).
func TestFailoverKeepsPlaces(t *testing.T) {
	for _, ttl := range []time.Duration{5 * time.Second, 0} {
		t.Run(fmt.Sprint("orphan TTL ", ttl), func(t *testing.T) { failoverKeepsPlaces(t, ttl) })
	}
}

// failoverOpts are Cluster options that retry through a failover.
var failoverOpts = []client.Option{client.WithMaxAttempts(200), client.WithBackoff(10*time.Millisecond, 200*time.Millisecond)}

func failoverKeepsPlaces(t *testing.T, orphanTTL time.Duration) {
	const keys, waiters = 10, 9 // 100 clients: a holder and 9 waiters per key
	r := startRig(t, orphanTTL)
	c, li, seeds := r.c, r.c.Leader(servertest.LeaderTimeout), r.addrs
	ms := c.Members()
	ctx := context.Background()
	opts := failoverOpts
	queued := func(key string) int { return r.lock(li, key).Waiters }

	type grant struct {
		pos   int
		fence uint64
	}
	var (
		mu      sync.Mutex
		granted = map[string][]grant{}
		wg      sync.WaitGroup
		errs    = make(chan error, keys*waiters)
		holders = make([]*client.Cluster, keys)
		tokens  = make([]string, keys)
	)
	for k := range keys {
		key := fmt.Sprintf("job%d", k)
		holders[k] = dialCluster(t, seeds, opts...)
		g, err := holders[k].Acquire(ctx, key, 0, time.Minute)
		if err != nil {
			t.Fatalf("holder of %s: %v", key, err)
		}
		tokens[k] = g.Token
		for pos := range waiters {
			cl := dialCluster(t, seeds, opts...)
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := cl.Acquire(ctx, key, 2*time.Minute, time.Minute)
				if err != nil {
					errs <- fmt.Errorf("waiter %d of %s: %w", pos, key, err)
					return
				}
				mu.Lock()
				granted[key] = append(granted[key], grant{pos: pos, fence: g.Fence()})
				mu.Unlock()
				if err := cl.Release(ctx, key, g.Token); err != nil {
					errs <- fmt.Errorf("release by waiter %d of %s: %w", pos, key, err)
				}
			}()
			testutil.Eventually(t, 30*time.Second, func() bool { return queued(key) == pos+1 }, "waiter queued in order")
		}
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		for i, m := range c.Members() {
			if i != li && m.Node.FSM().AppliedIndex() < ms[li].Node.FSM().AppliedIndex() {
				return false
			}
		}
		return true
	}, "followers caught up")

	c.Crash(li)
	nl := c.Leader(servertest.LeaderTimeout)
	t.Logf("leader %s crashed; %s leads", ms[li].ID, c.Members()[nl].ID)
	for k := range keys {
		if err := holders[k].Release(ctx, fmt.Sprintf("job%d", k), tokens[k]); err != nil {
			t.Fatalf("holder of job%d: Release after the failover: %v", k, err)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("waiters still waiting 2 minutes after the failover")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for k := range keys {
		key := fmt.Sprintf("job%d", k)
		got := granted[key]
		if len(got) != waiters {
			t.Errorf("%s: %d grants; want %d", key, len(got), waiters)
		}
		for i, g := range got {
			if g.pos != i {
				t.Errorf("%s: grant %d went to the waiter queued %d: %v", key, i, g.pos, got)
				break
			}
			if i > 0 && g.fence <= got[i-1].fence {
				t.Errorf("%s: fences not rising: %v", key, got)
				break
			}
		}
	}
	eng := c.Members()[nl].Node.FSM().Engine()
	for _, l := range eng.Snapshot(0).Locks {
		t.Errorf("left behind after every client released: %+v", l)
	}
}

// TestIdleHolderKeepsSessionThroughFailover: a Lock that holds and sends
// nothing (its renewal is far off) when the leader crashes keeps its lease
// past the orphan TTL: the Cluster's keepalive notices the dead connection
// and takes the session back on the new leader in time; and an Enqueue
// made on the dead connection is collected by a Wait on the new one.
func TestIdleHolderKeepsSessionThroughFailover(t *testing.T) {
	const orphanTTL = time.Second
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		ServerEdit: func(cfg *server.Config) { cfg.OrphanTTL = orphanTTL }})
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	seeds := []string{ms[0].Addr, ms[1].Addr, ms[2].Addr}
	ctx := context.Background()
	opts := []client.Option{client.WithMaxAttempts(200), client.WithBackoff(10*time.Millisecond, 100*time.Millisecond)}
	l := &client.Lock{Key: "idle", LeaseTTL: 60, Cluster: seeds, Options: opts}
	if got, err := l.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	defer l.Release(ctx)
	q := dialCluster(t, seeds, opts...)
	if g, acquired, err := q.Enqueue(ctx, "idle", time.Minute); err != nil || acquired {
		t.Fatalf("Enqueue = %+v, %v, %v; want queued", g, acquired, err)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		for i, m := range c.Members() {
			if i != li && m.Node.FSM().AppliedIndex() < ms[li].Node.FSM().AppliedIndex() {
				return false
			}
		}
		return true
	}, "followers caught up")
	c.Crash(li)
	nl := c.Leader(servertest.LeaderTimeout)
	m := c.Members()[nl]
	// Well past the orphan TTL, measured on the new leader's replica.
	start := time.Now()
	testutil.Eventually(t, 30*time.Second, func() bool { return time.Since(start) > 4*orphanTTL }, "time to pass")
	if holderOf(m, "idle") == 0 || !l.Held() {
		t.Fatalf("the idle holder's lease is gone %v after the failover (held here: %v): %v", time.Since(start), l.Held(), l.Err())
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		g, err := q.Wait(wctx, "idle", time.Minute)
		if err == nil {
			err = q.Release(ctx, "idle", g.Token)
		}
		done <- err
	}()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release on the new leader: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait for the Enqueue made before the failover: %v", err)
	}
}
