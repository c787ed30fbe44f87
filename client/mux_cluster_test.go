package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// TestMuxFailoverKeepsLease: a Mux over a cluster acts for a session; when
// the leader crashes it dials the new leader and attaches the session
// there: the Lock keeps its lease (its renewals reach the new leader), Lost
// stays open, and another Mux's acquire of the key waits for it.
func TestMuxFailoverKeepsLease(t *testing.T) {
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		ServerEdit: func(cfg *server.Config) { cfg.OrphanTTL = 20 * time.Second }})
	li := c.Leader(servertest.LeaderTimeout)
	var addrs []string
	for _, m := range c.Members() {
		addrs = append(addrs, m.Addr)
	}
	ctx := context.Background()
	m, err := client.DialMux(ctx, addrs, 2, client.WithIOTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Session() == "" {
		t.Fatal("no session on a cluster")
	}
	l := &client.Lock{Key: "k", LeaseTTL: 4, Mux: m}
	if ok, err := l.Acquire(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	tok := l.Token()
	c.Crash(li)
	ni := c.Leader(servertest.LeaderTimeout)
	if ni == li {
		t.Fatal("no new leader")
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := m.Renew(rctx, "k", tok, 4*time.Second); err != nil {
		t.Fatalf("renew on the new leader: %v", err)
	}
	if lost(l.Lost(), 3*time.Second) {
		t.Fatalf("lease lost: %v", l.Err())
	}
	o, err := client.DialMux(ctx, []string{c.Members()[ni].Addr}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.Acquire(ctx, "k", 0, 0); err != client.ErrTimeout {
		t.Fatalf("another Mux's try = %v; want ErrTimeout while held", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Acquire(ctx, "k", 10*time.Second, 0); err != nil {
		t.Fatalf("after release: %v", err)
	}
}
