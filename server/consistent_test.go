package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// A single node answers a consistent stats at once, like any other.
func TestConsistentStatsSingleNode(t *testing.T) {
	s := servertest.StartServer(t)
	c := dial(t, s.Addr)
	grant(t, c.do("l", "k", "0 30"), "ok")
	if st := c.do("stats", "consistent", ""); !strings.HasPrefix(st, "ok {") || !strings.Contains(st, `"k"`) {
		t.Fatalf("consistent stats = %q; want ok and the lock", st)
	}
}

// On a 3-node cluster a consistent stats on a follower shows the lock the
// leader just granted. A node left alone answers it with an error, not
// its state, while a plain stats still answers.
func TestConsistentStatsCluster(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	ms := c.Members()
	leader := dial(t, ms[li].Addr)
	followers := []*client{dial(t, ms[(li+1)%3].Addr), dial(t, ms[(li+2)%3].Addr)}
	for i := range 10 {
		key := fmt.Sprint("cs", i)
		grant(t, leader.do("l", key, "0 30"), "ok")
		for j, f := range followers {
			if st := f.do("stats", "consistent", ""); !strings.Contains(st, `"`+key+`"`) {
				t.Fatalf("follower %d: consistent stats right after the grant of %s lacks it: %.300s", j, key, st)
			}
		}
	}

	alone := (li + 1) % 3
	for i := range ms {
		if i != alone {
			c.Stop(i)
		}
	}
	f := followers[0]
	if st := f.do("stats", "consistent", ""); st != "error" && !strings.HasPrefix(st, "error_not_leader") {
		t.Fatalf("consistent stats on a node alone = %.300s; want error or error_not_leader", st)
	}
	if st := f.do("stats", "_", ""); !strings.HasPrefix(st, "ok {") {
		t.Fatalf("plain stats on a node alone = %.300s; want its state", st)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		return f.do("stats", "consistent", "") == "error_not_leader"
	}, "error_not_leader once the node knows no leader")
}
