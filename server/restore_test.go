package server_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// TestRestoreClosesParkedConn: a snapshot restore on the node holding a
// parked TCP acquire tells its Sink Canceled. The restored waiter may be
// granted unheard, so the outcome is unknown: the connection is closed,
// never left parked without an answer (a review caught it left hanging).
func TestRestoreClosesParkedConn(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	m := c.Members()[c.Leader(servertest.LeaderTimeout)]
	holder := dial(t, m.Addr)
	tok := grant(t, holder.do("l", "job", "0 30"), "ok")
	waiter := dial(t, m.Addr)
	waiter.req("l", "job", "60 30")
	waiter.silent(200 * time.Millisecond)

	// What installing a snapshot does (same state; the cluster is idle).
	fsm := m.Node.FSM()
	var state bytes.Buffer
	if _, err := fsm.WriteState(&state); err != nil {
		t.Fatal(err)
	}
	if err := fsm.Restore(state.Bytes()); err != nil {
		t.Fatal(err)
	}
	if got := holder.do("r", "job", tok); got != "ok" {
		t.Fatalf("release: %q", got)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		st := holder.do("stats", "_", "")
		return strings.Contains(st, `"key":"job"`) && !strings.Contains(st, `"waiters":1`)
	}, "waiter never granted")
	_ = waiter.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := waiter.br.ReadString('\n')
	if err != nil && !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("parked waiter got no answer and no close (err %v, %q); it holds the lock unheard", err, line)
	}
}
