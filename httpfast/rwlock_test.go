package httpfast

import (
	"net/http"
	"testing"
)

func TestRWLocks(t *testing.T) {
	h := startHTTP(t, nil)
	a, b, w, c := h.session(), h.session(), h.session(), h.session()
	read := "/v1/rwlocks/cfg?mode=read"
	ra := h.do(call{method: "POST", path: read, session: a, body: `{"acquire_timeout_s":0,"lease_ttl_s":30}`})
	wantStatus(t, "reader a", ra, http.StatusOK, "ok")
	rb := h.do(call{method: "POST", path: read, session: b, body: `{"acquire_timeout_s":0}`})
	wantStatus(t, "reader b", rb, http.StatusOK, "ok")
	wantStatus(t, "try-write", h.do(call{method: "POST", path: "/v1/rwlocks/cfg?mode=write", session: w, body: `{"acquire_timeout_s":0}`}),
		http.StatusConflict, "timeout")
	wantStatus(t, "no mode", h.do(call{method: "POST", path: "/v1/rwlocks/cfg", session: w, invalid: true}), http.StatusBadRequest, "bad_request")
	wantStatus(t, "lock on rw key", h.do(call{method: "POST", path: "/v1/locks/cfg", session: w, body: `{"acquire_timeout_s":0}`}),
		http.StatusConflict, "limit_mismatch")
	// A writer waits; a reader behind it does not overtake it.
	wch := h.async(call{method: "POST", path: "/v1/rwlocks/cfg?mode=write", session: w, body: `{"acquire_timeout_s":10}`})
	h.waitFor(2, 1)
	cch := h.async(call{method: "POST", path: read, session: c, body: `{"acquire_timeout_s":10}`})
	h.waitFor(2, 2)
	st := h.do(call{method: "GET", path: "/v1/rwlocks/cfg"})
	if st.str("kind") != "rwlock" || st.raw == nil {
		t.Fatalf("GET = %s", st.raw)
	}
	ws := st.body["waiters"].([]any)
	if ws[0].(map[string]any)["mode"] != "write" || ws[1].(map[string]any)["mode"] != "read" ||
		st.body["holders"].([]any)[0].(map[string]any)["mode"] != "read" {
		t.Fatalf("GET modes = %s", st.raw)
	}
	stats := h.do(call{method: "GET", path: "/v1/stats"})
	rws, _ := stats.body["rwlocks"].([]any)
	if len(rws) != 1 || rws[0].(map[string]any)["mode"] != "read" || rws[0].(map[string]any)["writers_waiting"] != 1.0 {
		t.Fatalf("stats = %s", stats.raw)
	}
	wantStatus(t, "renew a", h.do(call{method: "POST", path: "/v1/rwlocks/cfg/renew", session: a, body: `{"token":"` + ra.str("token") + `"}`}),
		http.StatusOK, "ok")
	wantStatus(t, "release a", h.do(call{method: "DELETE", path: "/v1/rwlocks/cfg?token=" + ra.str("token"), session: a}), http.StatusOK, "ok")
	// b's session ends: its read hold goes with it, and the writer is granted.
	wantStatus(t, "delete b", h.do(call{method: "DELETE", path: "/v1/sessions/" + b}), http.StatusOK, "ok")
	rw := <-wch
	wantStatus(t, "writer", rw, http.StatusOK, "ok")
	if rw.str("token") <= rb.str("token") {
		t.Fatalf("writer token %s not above reader's %s", rw.str("token"), rb.str("token"))
	}
	h.waitFor(1, 1)
	wantStatus(t, "release w", h.do(call{method: "DELETE", path: "/v1/rwlocks/cfg?token=" + rw.str("token"), session: w}), http.StatusOK, "ok")
	rc := <-cch
	wantStatus(t, "reader c", rc, http.StatusOK, "ok")
	if rc.str("token") <= rw.str("token") {
		t.Fatalf("reader token %s not above the writer's %s", rc.str("token"), rw.str("token"))
	}
}

func TestRWEnqueueWait(t *testing.T) {
	h := startHTTP(t, nil)
	a, b := h.session(), h.session()
	r := h.do(call{method: "POST", path: "/v1/rwlocks/q/enqueue?mode=write", session: a, body: `{"lease_ttl_s":20}`})
	wantStatus(t, "enqueue write", r, http.StatusOK, "acquired")
	tokA := r.str("token")
	wantStatus(t, "enqueue read", h.do(call{method: "POST", path: "/v1/rwlocks/q/enqueue?mode=read", session: b}), http.StatusOK, "queued")
	wantStatus(t, "bad mode", h.do(call{method: "POST", path: "/v1/rwlocks/q/enqueue?mode=both", session: b, invalid: true}),
		http.StatusBadRequest, "bad_request")
	wantStatus(t, "wait a", h.do(call{method: "POST", path: "/v1/rwlocks/q/wait", session: a}), http.StatusOK, "ok")
	bch := h.async(call{method: "POST", path: "/v1/rwlocks/q/wait", session: b, body: `{"wait_timeout_s":10}`})
	h.waitFor(1, 1)
	wantStatus(t, "release a", h.do(call{method: "DELETE", path: "/v1/rwlocks/q", session: a, body: `{"token":"` + tokA + `"}`}), http.StatusOK, "ok")
	rb := <-bch
	wantStatus(t, "wait b", rb, http.StatusOK, "ok")
	if rb.str("token") <= tokA {
		t.Fatalf("b's token %s not above %s", rb.str("token"), tokA)
	}
}
