package client_test

import (
	"context"
	"testing"
	"time"
)

// l has no bare "error" answer; a server that sends one (an older
// cluster-mode latchd did, for a proposal that failed in the node) does
// not get a grant with an empty token taken for success (review finding).
func TestBareErrorToAcquireIsNotAGrant(t *testing.T) {
	n := newFakeNode(t, func(cmd, key, arg string) string { return "error" })
	c := dialCluster(t, []string{n.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if g, err := c.Acquire(ctx, "job", 0, 30*time.Second); err == nil {
		t.Fatalf("Acquire answered \"error\" returned grant %+v and no error", g)
	}
}
