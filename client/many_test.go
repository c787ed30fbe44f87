package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/server/servertest"
)

// TestClusterAcquireManyRetriedByID: AcquireMany on a Cluster sends a
// request id after its keys, and an attempt whose connection broke after
// it was written is sent again with it: the caller sees one grant.
func TestClusterAcquireManyRetriedByID(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	dropper := newFakeNode(t, drop)
	c := dialCluster(t, []string{dropper.Addr, srv.Addr}, client.WithBackoff(time.Millisecond, time.Millisecond))
	gs, err := c.AcquireMany(context.Background(), []string{"a", "b"}, 0, 0)
	if err != nil || len(gs) != 2 {
		t.Fatalf("AcquireMany = %v, %v; want it retried on the live seed", gs, err)
	}
	ids := dropper.requestIDs()
	if dropper.count("ml") != 1 || len(ids) != 1 || !strings.HasPrefix(ids[0], "ml ") {
		t.Fatalf("dropper saw %d ml with ids %q; want one with an id", dropper.count("ml"), ids)
	}
	for _, k := range []string{"a", "b"} {
		if waitersOn(srv, k) != 0 {
			t.Fatalf("%s not held on the live seed", k)
		}
	}
}

// TestAcquireManyLastKeyAt: a last key that starts with "@" is still a
// key (the client adds an id after it), not taken for a request id.
func TestAcquireManyLastKeyAt(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	gs, err := dial(t, srv.Addr).AcquireMany(context.Background(), []string{"a", "@b"}, 0, 0)
	if err != nil || len(gs) != 2 {
		t.Fatalf("AcquireMany = %v, %v", gs, err)
	}
	if waitersOn(srv, "@b") != 0 || waitersOn(srv, "a") != 0 {
		t.Fatal("a and @b not both held")
	}
}
