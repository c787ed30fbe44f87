package server_test

import (
	"slices"
	"testing"

	"github.com/latchd/latchd/server/servertest"
)

// TestClusterMultiLockRequestID: an ml retried with its request id from
// another connection is applied once: the retry answers the first
// grant's tokens and no fence is issued for it.
func TestClusterMultiLockRequestID(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	lm := c.Members()[li]
	first := grants(t, dial(t, lm.Addr).do("ml", "ra rb @m.1", "0 30"), 2)
	eng := lm.Node.FSM().Engine()
	fence := eng.LastFence()
	again := grants(t, dial(t, lm.Addr).do("ml", "ra rb @m.1", "0 30"), 2)
	if !slices.Equal(first, again) {
		t.Fatalf("retried ml = %v; want the first grant %v", again, first)
	}
	if got := eng.LastFence(); got != fence {
		t.Fatalf("the retry issued fences: last %d, was %d", got, fence)
	}
	// Without the id the same request is a new one: refused while held.
	if got := dial(t, lm.Addr).do("ml", "ra rb", "0 30"); got != "timeout" {
		t.Fatalf("ml without the id = %q; want timeout", got)
	}
}
