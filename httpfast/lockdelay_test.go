package httpfast

import (
	"net/http"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
)

// TestLockDelayREST: a session that ends without releasing holds its lock
// back for --lock-delay; lock_delay_s sets a grant's own (0: none); the
// stats list the held-back slot.
func TestLockDelayREST(t *testing.T) {
	const delay = 400 * time.Millisecond
	h := startHTTP(t, nil, func(e *engine.Config, _ *server.Config) { e.LockDelay = delay })
	a, b := h.session(), h.session()
	wantStatus(t, "a acquires", h.do(call{method: "POST", path: "/v1/locks/k", session: a, body: `{"lease_ttl_s":30}`}), http.StatusOK, "ok")
	lost := time.Now() // no later than the loss
	wantStatus(t, "a ends", h.do(call{method: "DELETE", path: "/v1/sessions/" + a}), http.StatusOK, "ok")
	r := h.do(call{method: "GET", path: "/v1/stats"})
	if d, _ := r.body["delayed"].([]any); len(d) != 1 {
		t.Fatalf("stats while delayed: %s", r.raw)
	}
	wantStatus(t, "try-lock during the delay", h.do(call{method: "POST", path: "/v1/locks/k", session: b}), http.StatusConflict, "timeout")
	wantStatus(t, "b waits", h.do(call{method: "POST", path: "/v1/locks/k", session: b, body: `{"acquire_timeout_s":10,"lock_delay_s":0}`}), http.StatusOK, "ok")
	if waited := time.Since(lost); waited < delay {
		t.Fatalf("granted %v after the loss, before the %v delay", waited, delay)
	}
	// b asked for no delay: its session's end frees the key at once.
	wantStatus(t, "b ends", h.do(call{method: "DELETE", path: "/v1/sessions/" + b}), http.StatusOK, "ok")
	c := h.session()
	testutil.Eventually(t, 5*time.Second, func() bool {
		return h.do(call{method: "POST", path: "/v1/locks/k", session: c}).status == http.StatusOK
	}, "granted at once after a lock_delay_s 0 holder left")
	wantStatus(t, "negative", h.do(call{method: "POST", path: "/v1/locks/x", session: c, body: `{"lock_delay_s":-1}`, invalid: true}), http.StatusBadRequest, "bad_request")
	wantStatus(t, "not on wait", h.do(call{method: "POST", path: "/v1/locks/x/wait", session: c, body: `{"lock_delay_s":1}`, invalid: true}), http.StatusBadRequest, "bad_request")
}
