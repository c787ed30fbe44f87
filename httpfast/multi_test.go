package httpfast

import (
	"net/http"
	"testing"
	"time"
)

// TestMultiAcquireREST: POST /v1/multi is all or none, one token per key,
// queued in FIFO order with single-key requests, released key by key.
func TestMultiAcquireREST(t *testing.T) {
	h := startHTTP(t, nil)
	a, b, c := h.session(), h.session(), h.session()
	hb := h.do(call{method: "POST", path: "/v1/locks/b", session: a, body: `{}`})
	wantStatus(t, "lock b", hb, http.StatusOK, "ok")
	r := h.do(call{method: "POST", path: "/v1/multi", session: b, body: `{"keys":["a","b"]}`})
	wantStatus(t, "try of a busy set", r, http.StatusConflict, "timeout")
	setDone := make(chan resp, 1)
	go func() {
		setDone <- h.do(call{method: "POST", path: "/v1/multi", session: b, body: `{"keys":["a","b"],"acquire_timeout_s":20}`})
	}()
	h.waitFor(1, 2)
	single := make(chan resp, 1)
	go func() {
		single <- h.do(call{method: "POST", path: "/v1/locks/a", session: c, body: `{"acquire_timeout_s":20}`})
	}()
	h.waitFor(1, 3) // the single request waits behind the set on a
	rel := h.do(call{method: "DELETE", path: "/v1/locks/b", session: a, body: `{"token":"` + hb.str("token") + `"}`})
	wantStatus(t, "release b", rel, http.StatusOK, "ok")
	got := <-setDone
	wantStatus(t, "set", got, http.StatusOK, "ok")
	toks, _ := got.body["tokens"].([]any)
	if len(toks) != 2 || toks[0] == toks[1] {
		t.Fatalf("tokens %v", got.body["tokens"])
	}
	h.waitFor(2, 1)
	rel = h.do(call{method: "DELETE", path: "/v1/locks/a", session: b, body: `{"token":"` + toks[0].(string) + `"}`})
	wantStatus(t, "release a", rel, http.StatusOK, "ok")
	wantStatus(t, "single after the set", <-single, http.StatusOK, "ok")
	// Deleting the session releases the rest of the set.
	h.do(call{method: "DELETE", path: "/v1/sessions/" + b})
	h.waitFor(1, 0)
	// A bad body changes nothing.
	for _, body := range []string{`{"keys":[]}`, `{"keys":["x","x"]}`, `{"keys":["x y"]}`, `{}`} {
		r := h.do(call{method: "POST", path: "/v1/multi", session: c, body: body, invalid: true})
		wantStatus(t, body, r, http.StatusBadRequest, "")
	}
}

// TestMultiAcquireRESTSessionDeleted: deleting the session of a waiting
// set withdraws it from every key and answers 410.
func TestMultiAcquireRESTSessionDeleted(t *testing.T) {
	h := startHTTP(t, nil)
	a, b := h.session(), h.session()
	wantStatus(t, "lock y", h.do(call{method: "POST", path: "/v1/locks/y", session: a, body: `{}`}), http.StatusOK, "ok")
	done := make(chan resp, 1)
	go func() {
		done <- h.do(call{method: "POST", path: "/v1/multi", session: b, body: `{"keys":["x","y"],"acquire_timeout_s":20}`})
	}()
	h.waitFor(1, 2)
	h.do(call{method: "DELETE", path: "/v1/sessions/" + b})
	wantStatus(t, "set of a deleted session", <-done, http.StatusGone, "")
	h.waitFor(1, 0)
}

// TestClusterMultiAcquireREST: on a cluster, POST /v1/multi goes through
// the log, a queued set is granted through it, and a follower refuses.
func TestClusterMultiAcquireREST(t *testing.T) {
	rc := startRESTCluster(t, nil, 90*time.Second)
	lm, lh := rc.leader()
	a, b := lh.session(), lh.session()
	r := lh.do(call{method: "POST", path: "/v1/locks/m2", session: a, body: `{"lease_ttl_s":30}`})
	wantStatus(t, "lock m2", r, http.StatusOK, "ok")
	done := make(chan resp, 1)
	go func() {
		done <- lh.do(call{method: "POST", path: "/v1/multi", session: b, body: `{"keys":["m1","m2"],"acquire_timeout_s":20}`})
	}()
	waitCounts(t, lm, 1, 2)
	wantStatus(t, "release m2", lh.do(call{method: "DELETE", path: "/v1/locks/m2", session: a,
		body: `{"token":"` + r.str("token") + `"}`}), http.StatusOK, "ok")
	got := <-done
	wantStatus(t, "queued set", got, http.StatusOK, "ok")
	if toks, _ := got.body["tokens"].([]any); len(toks) != 2 {
		t.Fatalf("tokens %v", got.body["tokens"])
	}
	waitCounts(t, lm, 2, 0)
	f := rc.followers(lm)[0]
	fr := rc.h(f).do(call{method: "POST", path: "/v1/multi", session: b, body: `{"keys":["z1"]}`})
	if fr.status != http.StatusServiceUnavailable {
		t.Fatalf("follower answered %d %s", fr.status, fr.raw)
	}
}
