package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// TestAudit_LatchctlKeepsItsGrant: latchctl --servers lock holds its
// lock on one connection while CMD runs: renewal after renewal the leader
// sees the same owner hold it, CMD runs to its end, and latchctl exits
// with CMD's status, not as a lost lease. A client that dialled per call
// would release the lock with its own disconnect and stop CMD.
func TestAudit_LatchctlKeepsItsGrant(t *testing.T) {
	t.Parallel()
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(10 * time.Second)
	m := c.Members()[li]
	var seeds []string
	for i, mm := range c.Members() {
		if i != li {
			seeds = append([]string{mm.Addr}, seeds...) // followers first
		} else {
			seeds = append(seeds, mm.Addr)
		}
	}
	base := filepath.Join(t.TempDir(), "cmd")
	script := `echo ready > "$0.ready"; while [ ! -e "$0.stop" ]; do sleep 0.05; done`
	holder := start(t, nil, "--servers", strings.Join(seeds, ","), "lock", "k", "--ttl", "1",
		"--", "sh", "-c", script, base)
	waitFile(t, base+".ready", 20*time.Second)
	owner := func() (uint64, float64) {
		ki, ok := m.Node.FSM().Engine().InspectMax(time.Now().UnixNano(), "k", 1)
		if !ok || len(ki.Holders) == 0 {
			return 0, -1
		}
		return uint64(ki.Holders[0].Owner), ki.Holders[0].LeaseExpiresInS
	}
	first, last := owner()
	if first == 0 {
		t.Fatal("CMD runs, but nobody holds k on the leader")
	}
	renewals := 0
	testutil.Eventually(t, 20*time.Second, func() bool {
		o, left := owner()
		if o != first {
			t.Fatalf("after %d renewals k is held by %d; want %d throughout (stderr %q)", renewals, o, first,
				holder.stderr.String())
		}
		if left > last+0.2 {
			renewals++
		}
		last = left
		return renewals >= 3
	}, "three renewals")
	if err := os.WriteFile(base+".stop", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("latchctl exited %d: %s", code, holder.stderr.String())
	}
	if o, _ := owner(); o != 0 {
		t.Fatalf("k still held by %d after latchctl ended", o)
	}
}
