package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// TestClusterSendsIDsOnlyForItsSession: request ids are the session's own,
// so a Cluster never sends a request with an id on a connection whose
// session attach failed (a node answering not-leader while it takes over,
// which may be leading by the time the request arrives): it moves to the
// leader the answer named, attaches there, and sends the request there.
func TestClusterSendsIDsOnlyForItsSession(t *testing.T) {
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		ServerEdit: func(cfg *server.Config) { cfg.OrphanTTL = 5 * time.Second }})
	leader := c.Members()[c.Leader(servertest.LeaderTimeout)].Addr
	taking := newFakeNode(t, func(string, string, string) string { return "ok 0123456789abcdef0123456789abcdef 30" })
	taking.mu.Lock()
	taking.session = "error_not_leader " + leader
	taking.mu.Unlock()
	cl := dialCluster(t, []string{taking.Addr}, client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	ctx := context.Background()
	g, err := cl.Acquire(ctx, "k", 0, time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if n := taking.count("l"); n != 0 {
		t.Fatalf("the node that refused the session got %d lock requests; want 0", n)
	}
	if err := cl.Release(ctx, "k", g.Token); err != nil {
		t.Fatalf("Release on the leader: %v (the grant was not the leader's)", err)
	}
}
