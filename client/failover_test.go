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

func failoverKeepsPlaces(t *testing.T, orphanTTL time.Duration) {
	const keys, waiters = 10, 9 // 100 clients: a holder and 9 waiters per key
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		ServerEdit: func(cfg *server.Config) { cfg.OrphanTTL = orphanTTL }})
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	seeds := []string{ms[0].Addr, ms[1].Addr, ms[2].Addr}
	ctx := context.Background()
	opts := []client.Option{client.WithMaxAttempts(200), client.WithBackoff(10*time.Millisecond, 200*time.Millisecond)}
	queued := func(key string) int {
		for _, l := range ms[li].Node.FSM().Engine().Snapshot(0).Locks {
			if l.Key == key {
				return l.Waiters
			}
		}
		return -1
	}

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
