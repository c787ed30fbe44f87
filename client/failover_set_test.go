package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// TestFailoverKeepsSetPlace: a set waiting through AcquireMany when the
// leader crashes keeps its place in its keys' queues: its retry on the new
// leader (same request id) takes the wait over, and a single waiter that
// queued behind it on one of its keys is granted only after it, with a
// higher fence. With TCP sessions and without (request ids alone).
func TestFailoverKeepsSetPlace(t *testing.T) {
	for _, ttl := range []time.Duration{5 * time.Second, 0} {
		t.Run(fmt.Sprint("orphan TTL ", ttl), func(t *testing.T) { failoverKeepsSetPlace(t, ttl) })
	}
}

func failoverKeepsSetPlace(t *testing.T, orphanTTL time.Duration) {
	r := startRig(t, orphanTTL)
	c, li, seeds := r.c, r.c.Leader(servertest.LeaderTimeout), r.addrs
	ms := c.Members()
	ctx := context.Background()
	opts := failoverOpts
	waiting := func(key string) int { return r.lock(li, key).Waiters }
	holder := dialCluster(t, seeds, opts...)
	h, err := holder.Acquire(ctx, "a", 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		gs  []client.Grant
		err error
	}
	setDone, singleDone := make(chan result, 1), make(chan result, 1)
	w, x := dialCluster(t, seeds, opts...), dialCluster(t, seeds, opts...)
	go func() {
		gs, err := w.AcquireMany(ctx, []string{"a", "b"}, 2*time.Minute, time.Minute)
		setDone <- result{gs, err}
	}()
	testutil.Eventually(t, 30*time.Second, func() bool { return waiting("a") == 1 && waiting("b") == 1 }, "the set queued")
	go func() {
		g, err := x.Acquire(ctx, "b", 2*time.Minute, time.Minute)
		singleDone <- result{[]client.Grant{g}, err}
	}()
	testutil.Eventually(t, 30*time.Second, func() bool { return waiting("b") == 2 }, "the single waiter queued behind")
	testutil.Eventually(t, 30*time.Second, func() bool {
		for i, m := range c.Members() {
			if i != li && m.Node.FSM().AppliedIndex() < ms[li].Node.FSM().AppliedIndex() {
				return false
			}
		}
		return true
	}, "followers caught up")

	c.Crash(li)
	c.Leader(servertest.LeaderTimeout)
	if err := holder.Release(ctx, "a", h.Token); err != nil {
		t.Fatalf("holder's release after the failover: %v", err)
	}
	var set result
	select {
	case set = <-setDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("the set still waits 2 minutes after the failover")
	}
	if set.err != nil || len(set.gs) != 2 {
		t.Fatalf("AcquireMany = %v, %v", set.gs, set.err)
	}
	select {
	case r := <-singleDone:
		t.Fatalf("the single waiter, queued behind the set, was answered first: %+v", r)
	default:
	}
	if err := w.Release(ctx, "b", set.gs[1].Token); err != nil {
		t.Fatal(err)
	}
	var single result
	select {
	case single = <-singleDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("the single waiter still waits 2 minutes after the set released b")
	}
	if single.err != nil || single.gs[0].Fence() <= set.gs[1].Fence() {
		t.Fatalf("single waiter = %+v, %v; want a grant of b above the set's fence %d", single.gs, single.err, set.gs[1].Fence())
	}
	_ = w.Release(ctx, "a", set.gs[0].Token)
	_ = x.Release(ctx, "b", single.gs[0].Token)
}
