package httpfast

import (
	"net/http"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
)

// TestClusterIdempotencyKey: in cluster mode a request repeated with its
// Idempotency-Key is answered as the first was (one grant), and REST
// waits parked on a leader that crashes are re-attached on the new leader
// by their retries, in their FIFO order.
func TestClusterIdempotencyKey(t *testing.T) {
	rc := startRESTCluster(t, nil, 150*time.Second)
	lm, lh := rc.leader()
	li := -1
	for i, m := range rc.c.Members() {
		if m == lm {
			li = i
		}
	}
	hold, a, w, x := lh.session(), lh.session(), lh.session(), lh.session()
	acq := func(h *harness, sid, key, idem, body string) call {
		c := call{method: "POST", path: "/v1/locks/" + key, session: sid, body: body}
		if idem != "" {
			c.hdr = []string{"Idempotency-Key", idem}
		}
		return c
	}
	r := lh.do(acq(lh, hold, "job", "", `{"lease_ttl_s":60}`))
	wantStatus(t, "holder", r, http.StatusOK, "ok")
	holdTok := r.str("token")

	first := lh.do(acq(lh, a, "once", "k1", `{"lease_ttl_s":60}`))
	wantStatus(t, "first acquire", first, http.StatusOK, "ok")
	again := lh.do(acq(lh, a, "once", "k1", `{"lease_ttl_s":60}`))
	wantStatus(t, "repeated acquire", again, http.StatusOK, "ok")
	if again.str("token") != first.str("token") {
		t.Fatalf("repeated acquire got token %s; want the first one's %s", again.str("token"), first.str("token"))
	}
	wantStatus(t, "another key", lh.do(acq(lh, a, "once", "k2", "")), http.StatusConflict, "timeout")
	bad := acq(lh, a, "once", "has space", "")
	bad.invalid = true
	wantStatus(t, "bad Idempotency-Key", lh.do(bad), http.StatusBadRequest, "bad_request")

	// Two waits parked in order on the leader, which then crashes.
	park := func(h *harness, sid, idem string) <-chan resp {
		ch := make(chan resp, 1)
		go func() {
			r, _ := h.try(acq(h, sid, "job", idem, `{"acquire_timeout_s":60,"lease_ttl_s":60}`))
			ch <- r // an error (the leader crashed) is a zero resp
		}()
		return ch
	}
	wDead := park(lh, w, "w1")
	waitCounts(t, lm, 2, 1)
	xDead := park(lh, x, "x1")
	waitCounts(t, lm, 2, 2)
	for _, m := range rc.followers(lm) {
		waitCounts(t, m, 2, 2)
	}
	rc.c.Crash(li)
	for _, ch := range []<-chan resp{wDead, xDead} {
		if r := recv(t, ch, "a wait on the crashed leader"); r.status == http.StatusOK {
			t.Fatalf("a wait on the crashed leader was granted: %s", r.raw)
		}
	}
	nm, nh := rc.leader()
	waitCounts(t, nm, 2, 2)

	// The retries take the places back: x's retry first, yet w, queued
	// first, is granted first.
	xLive := park(nh, x, "x1")
	wLive := park(nh, w, "w1")
	testutil.Eventually(t, 30*time.Second, func() bool {
		h, q := counts(nm)
		return h == 2 && q == 2 && nm.Node.FSM().Engine().Sessions() >= 4
	}, "waits still queued")
	wantStatus(t, "holder's release on the new leader", nh.do(call{method: "DELETE", path: "/v1/locks/job", session: hold,
		body: `{"token":"` + holdTok + `"}`}), http.StatusOK, "ok")
	r = recv(t, wLive, "w's retry")
	wantStatus(t, "w's retry", r, http.StatusOK, "ok")
	select {
	case r := <-xLive:
		t.Fatalf("x, queued second, answered before w released: %d %s", r.status, r.raw)
	default:
	}
	wantStatus(t, "w's release", nh.do(call{method: "DELETE", path: "/v1/locks/job", session: w,
		body: `{"token":"` + r.str("token") + `"}`}), http.StatusOK, "ok")
	wantStatus(t, "x's retry", recv(t, xLive, "x's retry"), http.StatusOK, "ok")
}
