package httpfast

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
)

// multiCall is POST /v1/multi for session sid with body, and an
// Idempotency-Key when idem is not "".
func multiCall(sid, idem, body string) call {
	c := call{method: "POST", path: "/v1/multi", session: sid, body: body}
	if idem != "" {
		c.hdr = []string{"Idempotency-Key", idem}
	}
	return c
}

// tokensOf returns a multi answer's tokens.
func tokensOf(r resp) string { return fmt.Sprint(r.body["tokens"]) }

// TestMultiIdempotencyKeyChecked: POST /v1/multi takes an Idempotency-Key
// as the single-key routes do: a bad one is 400, a good one is accepted
// (a single node answers each request anew).
func TestMultiIdempotencyKeyChecked(t *testing.T) {
	h := startHTTP(t, nil)
	a := h.session()
	bad := multiCall(a, "has space", `{"keys":["a","b"]}`)
	bad.invalid = true
	wantStatus(t, "bad Idempotency-Key", h.do(bad), http.StatusBadRequest, "bad_request")
	wantStatus(t, "set with a key", h.do(multiCall(a, "m.1", `{"keys":["a","b"]}`)), http.StatusOK, "ok")
}

// TestClusterMultiIdempotencyKey: in cluster mode POST /v1/multi retried
// with its Idempotency-Key is applied once (the same tokens, no new
// fence); the same key from another session is that session's own
// request; and a set parked on a leader that crashes, retried on the new
// leader with its key, keeps its place in the queues: it is granted
// before a wait that queued behind it.
func TestClusterMultiIdempotencyKey(t *testing.T) {
	rc := startRESTCluster(t, nil, 150*time.Second)
	lm, lh := rc.leader()
	a, b := lh.session(), lh.session()
	first := lh.do(multiCall(a, "mk", `{"keys":["m1","m2"],"lease_ttl_s":60}`))
	wantStatus(t, "first set", first, http.StatusOK, "ok")
	fence := lm.Node.FSM().Engine().LastFence()
	again := lh.do(multiCall(a, "mk", `{"keys":["m1","m2"],"lease_ttl_s":60}`))
	wantStatus(t, "retried set", again, http.StatusOK, "ok")
	if tokensOf(again) != tokensOf(first) {
		t.Fatalf("retried set got tokens %s; want the first one's %s", tokensOf(again), tokensOf(first))
	}
	if got := lm.Node.FSM().Engine().LastFence(); got != fence {
		t.Fatalf("the retry issued fences: last %d, was %d", got, fence)
	}
	// b's "mk" is b's own: a's keys are busy for it, other keys its own grant.
	wantStatus(t, "b's set on a's keys", lh.do(multiCall(b, "mk", `{"keys":["m1","m2"]}`)), http.StatusConflict, "timeout")
	other := lh.do(multiCall(b, "mk2", `{"keys":["m3","m4"]}`))
	wantStatus(t, "b's set", other, http.StatusOK, "ok")
	if own := lh.do(multiCall(a, "mk2", `{"keys":["m5","m6"]}`)); own.status != http.StatusOK || tokensOf(own) == tokensOf(other) {
		t.Fatalf("a's set with b's key = %d %s; want a grant of its own", own.status, own.raw)
	}

	// A set parked in order before a single wait; the leader crashes.
	hold, w, x := lh.session(), lh.session(), lh.session()
	hj := lh.do(call{method: "POST", path: "/v1/locks/j1", session: hold, body: `{"lease_ttl_s":60}`})
	wantStatus(t, "holder of j1", hj, http.StatusOK, "ok")
	park := func(h *harness, c call) <-chan resp {
		ch := make(chan resp, 1)
		go func() {
			r, _ := h.try(c)
			ch <- r // an error (the leader crashed) is a zero resp
		}()
		return ch
	}
	setBody := `{"keys":["j1","j2"],"acquire_timeout_s":60,"lease_ttl_s":60}`
	single := call{method: "POST", path: "/v1/locks/j2", session: x, body: `{"acquire_timeout_s":60,"lease_ttl_s":60}`,
		hdr: []string{"Idempotency-Key", "x1"}}
	held, _ := counts(lm)
	wDead := park(lh, multiCall(w, "w1", setBody))
	waitCounts(t, lm, held, 2)
	xDead := park(lh, single)
	waitCounts(t, lm, held, 3)
	for _, m := range rc.followers(lm) {
		waitCounts(t, m, held, 3)
	}
	li := -1
	for i, m := range rc.c.Members() {
		if m == lm {
			li = i
		}
	}
	rc.c.Crash(li)
	for _, ch := range []<-chan resp{wDead, xDead} {
		if r := recv(t, ch, "a wait on the crashed leader"); r.status == http.StatusOK {
			t.Fatalf("a wait on the crashed leader was granted: %s", r.raw)
		}
	}
	nm, nh := rc.leader()
	waitCounts(t, nm, held, 3)

	// x retries first, yet w's set, queued first, is granted first.
	xLive := park(nh, single)
	wLive := park(nh, multiCall(w, "w1", setBody))
	testutil.Eventually(t, 30*time.Second, func() bool {
		h, q := counts(nm)
		return h == held && q == 3 && nm.Node.FSM().Engine().Sessions() >= 5
	}, "waits still queued, once each")
	wantStatus(t, "holder's release on the new leader", nh.do(call{method: "DELETE", path: "/v1/locks/j1", session: hold,
		body: `{"token":"` + hj.str("token") + `"}`}), http.StatusOK, "ok")
	r := recv(t, wLive, "w's retry")
	wantStatus(t, "w's retried set", r, http.StatusOK, "ok")
	select {
	case r := <-xLive:
		t.Fatalf("x, queued behind the set, answered before it released: %d %s", r.status, r.raw)
	default:
	}
	toks, _ := r.body["tokens"].([]any)
	if len(toks) != 2 {
		t.Fatalf("w's tokens %v", r.body["tokens"])
	}
	wantStatus(t, "w's release of j2", nh.do(call{method: "DELETE", path: "/v1/locks/j2", session: w,
		body: fmt.Sprintf(`{"token":%q}`, toks[1])}), http.StatusOK, "ok")
	wantStatus(t, "x's retry", recv(t, xLive, "x's retry"), http.StatusOK, "ok")
}
