package httpfast

import (
	"net/http"
	"testing"

	"github.com/latchd/latchd/internal/clock"
)

// TestDrainAnswersShuttingDown: once a graceful stop begins (the engine's
// Drain and the server's), a parked acquire answers 503 shutting_down, so
// do new acquires, enqueues and waits, /healthz answers 503, and the
// holder can still renew and release. Every answer is checked against the
// OpenAPI document.
func TestDrainAnswersShuttingDown(t *testing.T) {
	h := startHTTP(t, nil)
	a, b := h.session(), h.session()
	r := h.do(call{method: "POST", path: "/v1/locks/k", session: a})
	wantStatus(t, "a acquires", r, http.StatusOK, "ok")
	tok := r.str("token")
	ch := h.async(call{method: "POST", path: "/v1/locks/k", session: b, body: `{"acquire_timeout_s":30}`})
	h.waitFor(1, 1)

	h.srv.Drain()
	if n := h.ts.Engine.Drain(clock.Now()); n != 1 {
		t.Fatalf("Drain withdrew %d waits, want 1", n)
	}
	wantStatus(t, "b's parked acquire", recv(t, ch, "b's parked acquire"), http.StatusServiceUnavailable, "shutting_down")
	wantStatus(t, "a new acquire", h.do(call{method: "POST", path: "/v1/locks/j", session: b}), http.StatusServiceUnavailable, "shutting_down")
	wantStatus(t, "an enqueue", h.do(call{method: "POST", path: "/v1/locks/j/enqueue", session: b}), http.StatusServiceUnavailable, "shutting_down")
	wantStatus(t, "healthz", h.do(call{method: "GET", path: "/healthz"}), http.StatusServiceUnavailable, "shutting_down")
	wantStatus(t, "a renews", h.do(call{method: "POST", path: "/v1/locks/k/renew", session: a, body: `{"token":"` + tok + `"}`}), http.StatusOK, "ok")
	wantStatus(t, "a releases", h.do(call{method: "DELETE", path: "/v1/locks/k", session: a, body: `{"token":"` + tok + `"}`}), http.StatusOK, "ok")
	h.waitFor(0, 0)
}
