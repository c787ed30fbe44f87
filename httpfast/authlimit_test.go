package httpfast

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
)

// TestSessionsPerIPCap: one client IP cannot open more than
// MaxSessionsPerIP sessions, while the global cap is far off; a deleted
// session frees its slot.
func TestSessionsPerIPCap(t *testing.T) {
	h := startHTTP(t, func(c *Config) { c.MaxSessionsPerIP = 3 })
	var ids []string
	for range 3 {
		ids = append(ids, h.session())
	}
	r := h.do(call{method: "POST", path: "/v1/sessions"})
	wantStatus(t, "a fourth session from one IP", r, http.StatusTooManyRequests, "max_sessions")
	if r.header.Get("Retry-After") == "" {
		t.Error("429 max_sessions without Retry-After")
	}
	wantStatus(t, "delete one", h.do(call{method: "DELETE", path: "/v1/sessions/" + ids[0]}), http.StatusOK, "ok")
	h.session() // its slot is free again
}

// TestRegistryPerIPForgetsEnded: a session that ended in the engine (an
// expiry) without the registry hearing of it does not count against its
// IP's cap.
func TestRegistryPerIPForgetsEnded(t *testing.T) {
	eng, err := engine.New(engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var r registry
	r.init(false)
	b := backend.NewLocal(eng)
	ip, other := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	_, first, err := r.create(b, time.Minute, 0, ip, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.create(b, time.Minute, 0, ip, 2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.create(b, time.Minute, 0, ip, 2); err != errMaxSessionsPerIP {
		t.Fatalf("third session from one IP: %v; want errMaxSessionsPerIP", err)
	}
	if _, _, err := r.create(b, time.Minute, 0, other, 2); err != nil {
		t.Fatalf("another IP: %v", err)
	}
	eng.CloseSession(0, first) // as an expiry would
	if _, _, err := r.create(b, time.Minute, 0, ip, 2); err != nil {
		t.Fatalf("after one of its sessions ended: %v", err)
	}
}

// TestAuthFailuresLimitedREST: past AuthFailuresPerMinute wrong bearer
// tokens from one IP, its requests get 429 rate_limited, even with the
// right token, without it being compared.
func TestAuthFailuresLimitedREST(t *testing.T) {
	h := startHTTP(t, func(c *Config) { c.AuthToken = "s3cret"; c.AuthFailuresPerMinute = 2 })
	for range 2 {
		wantStatus(t, "wrong token", h.do(call{method: "POST", path: "/v1/sessions", hdr: []string{"Authorization", "Bearer nope"}}),
			http.StatusUnauthorized, "unauthorized")
	}
	r := h.do(call{method: "POST", path: "/v1/sessions", hdr: []string{"Authorization", "Bearer s3cret"}})
	wantStatus(t, "right token past the limit", r, http.StatusTooManyRequests, "rate_limited")
	if r.header.Get("Retry-After") == "" {
		t.Error("429 rate_limited without Retry-After")
	}
	wantStatus(t, "healthz stays open", h.do(call{method: "GET", path: "/healthz"}), http.StatusOK, "")
}
