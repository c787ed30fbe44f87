package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/server/servertest"
)

// stats --consistent on a follower shows the lock the leader just granted;
// on a single node it answers like stats.
func TestStatsConsistent(t *testing.T) {
	t.Parallel()
	s := servertest.StartServer(t)
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(10 * time.Second)
	ms := c.Members()
	ctx := context.Background()
	for _, addrs := range [][2]string{{s.Addr, s.Addr}, {ms[li].Addr, ms[(li+1)%3].Addr}} {
		conn, err := client.Dial(ctx, addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		key := fmt.Sprint("consistent-", addrs[1])
		if _, err := conn.Acquire(ctx, key, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runCtl(t, nil, 10*time.Second, "--addr", addrs[1], "stats", "--consistent", "--json")
		var st client.Stats
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Locks) != 1 || st.Locks[0].Key != key {
			t.Fatalf("stats --consistent on %s exited %d: %q %s (%v)", addrs[1], code, out, stderr, err)
		}
	}
}
