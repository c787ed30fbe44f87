package httpfast

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/server"
)

// TestSessionKeyShare: a REST session may hold or wait on at most
// MaxKeysPerOwner keys; past it a new key is answered 429 max_locks (the
// answer of a full table), while another session still gets one.
func TestSessionKeyShare(t *testing.T) {
	h := startHTTP(t, nil, func(ec *engine.Config, _ *server.Config) {
		ec.MaxKeys = 16
		ec.MaxKeysPerOwner = 4
	})
	a, b := h.session(), h.session()
	for i := range 4 {
		wantStatus(t, "within the share", h.do(call{method: "POST", path: fmt.Sprintf("/v1/locks/k%d", i), session: a}), http.StatusOK, "ok")
	}
	r := h.do(call{method: "POST", path: "/v1/locks/k4/enqueue", session: a})
	wantStatus(t, "past the share", r, http.StatusTooManyRequests, "max_locks")
	wantStatus(t, "another session", h.do(call{method: "POST", path: "/v1/locks/k4", session: b}), http.StatusOK, "ok")
}
