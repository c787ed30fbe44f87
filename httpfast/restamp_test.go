package httpfast

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
)

// TestRestampKeepsParkedSession: the restamp a new leader writes makes
// every session idle, but one whose request is still parked (on the old
// leader, which still applies the log and will answer it) keeps its TTL
// from its wait's deadline: it does not expire under the live request, so
// the lock it holds (lease 60 s) stays its own. (A review caught the first
// version expiring it.)
func TestRestampKeepsParkedSession(t *testing.T) {
	rc := startRESTCluster(t, func(c *Config) { c.SessionTTL = 2 * time.Second }, 90*time.Second)
	lm, lh := rc.leader()
	// A TCP connection holds "b" (TCP owners never expire).
	tc, err := net.Dial("tcp", lm.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	fmt.Fprint(tc, "l\nb\n0 600\n")
	if line, _ := bufio.NewReader(tc).ReadString('\n'); len(line) < 3 || line[:3] != "ok " {
		t.Fatalf("tcp lock: %q", line)
	}
	sid := lh.session()
	wantStatus(t, "acquire a", lh.do(call{method: "POST", path: "/v1/locks/a", session: sid, body: `{"lease_ttl_s":60}`}),
		http.StatusOK, "ok")
	parked := lh.async(call{method: "POST", path: "/v1/locks/b", session: sid, body: `{"acquire_timeout_s":30}`})
	waitCounts(t, lm, 2, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lm.Node.TransferLeadership(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var nm = lm
	for nm == lm {
		nm, _ = rc.leader()
	}
	nh := rc.h(nm)
	// The failure is an expiry that must not come: wait until one surely
	// would have. A canary session, opened (idle) after the restamp made
	// sid idle, expires no earlier than sid would without the fix; its
	// expiry comes through the log, so any member's replica shows it.
	if n := nm.Node.FSM().Engine().Sessions(); n != 1 {
		t.Fatalf("%d sessions on the new leader before the canary; want sid only", n)
	}
	nh.session() // the canary
	testutil.Eventually(t, 30*time.Second, func() bool { return nm.Node.FSM().Engine().Sessions() < 2 },
		"the canary session (TTL 2 s) never expired")
	// Another session tries for a. On a loaded machine leadership may move
	// again in between: ask whichever member leads now.
	var r resp
	testutil.Eventually(t, 30*time.Second, func() bool {
		_, h := rc.leader()
		other, err := h.try(call{method: "POST", path: "/v1/sessions"})
		if err != nil || other.status != http.StatusCreated {
			t.Logf("open another session: %d %s %v", other.status, other.raw, err)
			return false
		}
		r, err = h.try(call{method: "POST", path: "/v1/locks/a", session: other.str("session_id"), body: `{"lease_ttl_s":60}`})
		return err == nil && !(r.status == http.StatusServiceUnavailable && r.str("error") == "not_leader")
	}, "no leader took the other session's acquire")
	t.Logf("other session acquire a: %d %s", r.status, r.raw)
	if r.status == http.StatusOK {
		t.Errorf("lock a (60 s lease, session with a request in flight) taken by another session: %s", r.raw)
	}
	select {
	case p := <-parked:
		t.Logf("parked request answered %d %s", p.status, p.raw)
	default:
	}
}
