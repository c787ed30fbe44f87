package httpfast

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/server"
)

func TestSessionLifecycle(t *testing.T) {
	h := startHTTP(t, nil)
	r := h.do(call{method: "POST", path: "/v1/sessions"})
	wantStatus(t, "create", r, http.StatusCreated, "")
	id := r.str("session_id")
	if len(id) != 32 || r.num("ttl_s") != 60 {
		t.Fatalf("create = %s; want a 32-hex id and ttl_s 60", r.raw)
	}
	if other := h.session(); other == id {
		t.Fatalf("two sessions share id %s", id)
	}
	r = h.do(call{method: "POST", path: "/v1/sessions/" + id + "/keepalive"})
	wantStatus(t, "keepalive", r, http.StatusOK, "ok")
	if r.num("ttl_s") != 60 {
		t.Fatalf("keepalive = %s; want ttl_s 60", r.raw)
	}
	wantStatus(t, "delete", h.do(call{method: "DELETE", path: "/v1/sessions/" + id}), http.StatusOK, "ok")
	wantStatus(t, "delete again", h.do(call{method: "DELETE", path: "/v1/sessions/" + id}), http.StatusGone, "session_gone")
	wantStatus(t, "keepalive deleted", h.do(call{method: "POST", path: "/v1/sessions/" + id + "/keepalive"}), http.StatusGone, "session_gone")
	wantStatus(t, "acquire deleted", h.do(call{method: "POST", path: "/v1/locks/k", session: id}), http.StatusGone, "session_gone")
	wantStatus(t, "never existed", h.do(call{method: "DELETE", path: "/v1/sessions/" + strings.Repeat("0", 32)}), http.StatusGone, "session_gone")
}

// TestMaxSessions fills the session cap: the next POST /v1/sessions is
// 429 max_sessions and opens no engine owner; a DELETE or an expiry frees
// a slot.
func TestMaxSessions(t *testing.T) {
	h := startHTTP(t, func(c *Config) { c.MaxSessions = 2 })
	a := h.session()
	h.session()
	r := h.do(call{method: "POST", path: "/v1/sessions"})
	wantStatus(t, "create over the cap", r, http.StatusTooManyRequests, "max_sessions")
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After = %q; want 1", got)
	}
	if n := h.ts.Engine.Sessions(); n != 2 {
		t.Fatalf("engine has %d sessions after a refusal; want 2", n)
	}
	if n := h.srv.Sessions(); n != 2 {
		t.Fatalf("server names %d sessions after a refusal; want 2", n)
	}
	wantStatus(t, "delete a", h.do(call{method: "DELETE", path: "/v1/sessions/" + a}), http.StatusOK, "ok")
	c := h.session() // the freed slot
	wantStatus(t, "create over the cap again", h.do(call{method: "POST", path: "/v1/sessions"}), http.StatusTooManyRequests, "max_sessions")
	wantStatus(t, "c works", h.do(call{method: "POST", path: "/v1/locks/k", session: c}), http.StatusOK, "ok")

	// Expiry frees slots too: jump the engine's clock past the TTL.
	h.ts.Engine.Expire(clock.Now() + int64(61*time.Second))
	h.session()
	h.session()
	wantStatus(t, "create over the cap after expiry", h.do(call{method: "POST", path: "/v1/sessions"}), http.StatusTooManyRequests, "max_sessions")
}

func TestLockAcquireRenewRelease(t *testing.T) {
	h := startHTTP(t, nil)
	a, b := h.session(), h.session()

	r := h.do(call{method: "POST", path: "/v1/locks/job", session: a, body: `{"acquire_timeout_s":0,"lease_ttl_s":30}`})
	wantStatus(t, "acquire", r, http.StatusOK, "ok")
	if r.num("lease_ttl_s") != 30 {
		t.Fatalf("acquire = %s; want lease_ttl_s 30", r.raw)
	}
	tok := r.str("token")
	if _, err := fence.ParseString(tok); err != nil {
		t.Fatalf("token %q: %v", tok, err)
	}

	wantStatus(t, "busy try-lock", h.do(call{method: "POST", path: "/v1/locks/job", session: b}), http.StatusConflict, "timeout")

	r = h.do(call{method: "POST", path: "/v1/locks/job/renew", session: a, body: `{"token":"` + tok + `","lease_ttl_s":45}`})
	wantStatus(t, "renew", r, http.StatusOK, "ok")
	if r.num("remaining_s") != 45 {
		t.Fatalf("renew = %s; want remaining_s 45", r.raw)
	}
	r = h.do(call{method: "POST", path: "/v1/locks/job/renew", session: a, body: `{"token":"` + tok + `"}`})
	if r.num("remaining_s") != 45 {
		t.Fatalf("renew without ttl = %s; want the lease's own 45", r.raw)
	}

	wrong := strings.Repeat("0", 16) + tok[16:]
	wantStatus(t, "renew wrong token", h.do(call{method: "POST", path: "/v1/locks/job/renew", session: a, body: `{"token":"` + wrong + `"}`}), http.StatusConflict, "not_holder")
	wantStatus(t, "release wrong token", h.do(call{method: "DELETE", path: "/v1/locks/job", session: a, body: `{"token":"` + wrong + `"}`}), http.StatusConflict, "not_holder")
	wantStatus(t, "release", h.do(call{method: "DELETE", path: "/v1/locks/job?token=" + tok, session: a}), http.StatusOK, "ok")
	wantStatus(t, "release twice", h.do(call{method: "DELETE", path: "/v1/locks/job", session: a, body: `{"token":"` + tok + `"}`}), http.StatusConflict, "not_holder")
	wantStatus(t, "renew released", h.do(call{method: "POST", path: "/v1/locks/job/renew", session: a, body: `{"token":"` + tok + `"}`}), http.StatusConflict, "not_holder")

	r = h.do(call{method: "POST", path: "/v1/locks/job", session: b})
	wantStatus(t, "acquire after release", r, http.StatusOK, "ok")
	if r.num("lease_ttl_s") != 33 {
		t.Fatalf("acquire without lease_ttl_s = %s; want the default 33", r.raw)
	}
	if r.str("token") <= tok {
		t.Fatalf("second token %s not newer than %s", r.str("token"), tok)
	}
}

func TestDflockdSessionHeader(t *testing.T) {
	h := startHTTP(t, nil)
	id := h.session()
	r := h.do(call{method: "POST", path: "/v1/locks/k", hdr: []string{"X-Dflockd-Session", id}})
	wantStatus(t, "acquire with X-Dflockd-Session", r, http.StatusOK, "ok")
}

func TestEnqueueWait(t *testing.T) {
	h := startHTTP(t, nil)
	a, b, c := h.session(), h.session(), h.session()

	r := h.do(call{method: "POST", path: "/v1/locks/q/enqueue", session: a, body: `{"lease_ttl_s":20}`})
	wantStatus(t, "enqueue free", r, http.StatusOK, "acquired")
	tokA := r.str("token")
	if r.num("lease_ttl_s") != 20 || len(tokA) != 32 {
		t.Fatalf("enqueue free = %s", r.raw)
	}
	wantStatus(t, "enqueue again", h.do(call{method: "POST", path: "/v1/locks/q/enqueue", session: a}), http.StatusConflict, "already_enqueued")
	// A wait collects the grant the enqueue already took, once.
	r = h.do(call{method: "POST", path: "/v1/locks/q/wait", session: a})
	wantStatus(t, "wait after acquired", r, http.StatusOK, "ok")
	if r.str("token") != tokA || r.num("lease_ttl_s") != 20 {
		t.Fatalf("wait after acquired = %s; want token %s and lease_ttl_s 20", r.raw, tokA)
	}
	wantStatus(t, "second wait after acquired", h.do(call{method: "POST", path: "/v1/locks/q/wait", session: a}), http.StatusConflict, "not_enqueued")
	wantStatus(t, "enqueue busy", h.do(call{method: "POST", path: "/v1/locks/q/enqueue", session: b}), http.StatusOK, "queued")
	wantStatus(t, "wait 0 leaves queue", h.do(call{method: "POST", path: "/v1/locks/q/wait", session: b, body: `{"wait_timeout_s":0}`}), http.StatusConflict, "timeout")
	wantStatus(t, "wait after timeout", h.do(call{method: "POST", path: "/v1/locks/q/wait", session: b}), http.StatusConflict, "not_enqueued")
	wantStatus(t, "wait never enqueued", h.do(call{method: "POST", path: "/v1/locks/q/wait", session: c}), http.StatusConflict, "not_enqueued")
	wantStatus(t, "enqueue b", h.do(call{method: "POST", path: "/v1/locks/q/enqueue", session: b}), http.StatusOK, "queued")
	wantStatus(t, "enqueue c", h.do(call{method: "POST", path: "/v1/locks/q/enqueue", session: c}), http.StatusOK, "queued")
	wantStatus(t, "release a", h.do(call{method: "DELETE", path: "/v1/locks/q", session: a, body: `{"token":"` + tokA + `"}`}), http.StatusOK, "ok")
	// FIFO: b enqueued first, so b holds; c's wait times out at once.
	wantStatus(t, "c wait 0", h.do(call{method: "POST", path: "/v1/locks/q/wait", session: c}), http.StatusConflict, "timeout")
	r = h.do(call{method: "POST", path: "/v1/locks/q/wait", session: b, body: `{"wait_timeout_s":5}`})
	wantStatus(t, "b wait", r, http.StatusOK, "ok")
	if r.num("lease_ttl_s") != 33 || r.str("token") <= tokA {
		t.Fatalf("b wait = %s; want lease 33 and a token newer than %s", r.raw, tokA)
	}
}

func TestSemaphores(t *testing.T) {
	h := startHTTP(t, nil)
	s := []string{h.session(), h.session(), h.session(), h.session()}
	body := `{"limit":2,"acquire_timeout_s":0}`
	var toks []string
	for i := range 2 {
		r := h.do(call{method: "POST", path: "/v1/semaphores/pool", session: s[i], body: body})
		wantStatus(t, "acquire slot "+strconv.Itoa(i), r, http.StatusOK, "ok")
		toks = append(toks, r.str("token"))
	}
	wantStatus(t, "third holder", h.do(call{method: "POST", path: "/v1/semaphores/pool", session: s[2], body: body}), http.StatusConflict, "timeout")
	wantStatus(t, "other limit", h.do(call{method: "POST", path: "/v1/semaphores/pool", session: s[2], body: `{"limit":3}`}), http.StatusConflict, "limit_mismatch")
	wantStatus(t, "lock on semaphore key", h.do(call{method: "POST", path: "/v1/locks/pool", session: s[2]}), http.StatusConflict, "limit_mismatch")
	wantStatus(t, "enqueue other limit", h.do(call{method: "POST", path: "/v1/semaphores/pool/enqueue", session: s[2], body: `{"limit":5}`}), http.StatusConflict, "limit_mismatch")
	wantStatus(t, "enqueue", h.do(call{method: "POST", path: "/v1/semaphores/pool/enqueue", session: s[2], body: `{"limit":2,"lease_ttl_s":9}`}), http.StatusOK, "queued")
	r := h.do(call{method: "POST", path: "/v1/semaphores/pool/renew", session: s[0], body: `{"token":"` + toks[0] + `","lease_ttl_s":12}`})
	wantStatus(t, "renew", r, http.StatusOK, "ok")
	if r.num("remaining_s") != 12 {
		t.Fatalf("renew = %s", r.raw)
	}
	wantStatus(t, "release", h.do(call{method: "DELETE", path: "/v1/semaphores/pool", session: s[0], body: `{"token":"` + toks[0] + `"}`}), http.StatusOK, "ok")
	r = h.do(call{method: "POST", path: "/v1/semaphores/pool/wait", session: s[2]})
	wantStatus(t, "wait gets freed slot", r, http.StatusOK, "ok")
	if r.num("lease_ttl_s") != 9 {
		t.Fatalf("wait = %s; want the enqueued lease 9", r.raw)
	}
	st := h.ts.Engine.Snapshot(0)
	if len(st.Semaphores) != 1 || st.Semaphores[0].Holders != 2 || st.Semaphores[0].Limit != 2 {
		t.Fatalf("semaphores = %+v; want pool with 2 of 2 held", st.Semaphores)
	}
	r = h.do(call{method: "POST", path: "/v1/semaphores/fresh/enqueue", session: s[3], body: `{"limit":4}`})
	wantStatus(t, "enqueue free semaphore", r, http.StatusOK, "acquired")
}

func TestEngineLimits(t *testing.T) {
	h := startHTTP(t, nil, func(ec *engine.Config, _ *server.Config) {
		ec.MaxKeys = 1
		ec.MaxWaiters = 1
	})
	a, b, c := h.session(), h.session(), h.session()
	wantStatus(t, "first key", h.do(call{method: "POST", path: "/v1/locks/one", session: a}), http.StatusOK, "ok")
	r := h.do(call{method: "POST", path: "/v1/locks/two", session: a})
	wantStatus(t, "second key", r, http.StatusTooManyRequests, "max_locks")
	if r.header.Get("Retry-After") == "" {
		t.Fatalf("max_locks without Retry-After")
	}
	wantStatus(t, "first waiter", h.do(call{method: "POST", path: "/v1/locks/one/enqueue", session: b}), http.StatusOK, "queued")
	r = h.do(call{method: "POST", path: "/v1/locks/one/enqueue", session: c})
	wantStatus(t, "second waiter", r, http.StatusTooManyRequests, "max_waiters")
	if r.header.Get("Retry-After") == "" {
		t.Fatalf("max_waiters without Retry-After")
	}
}

// TestWaitLeaseExpired: a wait whose enqueued grant's lease ran out answers
// lease_expired (dflockd v1.10's error_lease_expired), once.
func TestWaitLeaseExpired(t *testing.T) {
	h := startHTTP(t, nil)
	a := h.session()
	wantStatus(t, "enqueue", h.do(call{method: "POST", path: "/v1/locks/lapse/enqueue", session: a, body: `{"lease_ttl_s":1}`}), http.StatusOK, "acquired")
	h.waitFor(0, 0) // the lease expired and the slot went on
	wantStatus(t, "wait after expiry", h.do(call{method: "POST", path: "/v1/locks/lapse/wait", session: a}), http.StatusConflict, "lease_expired")
	wantStatus(t, "second wait", h.do(call{method: "POST", path: "/v1/locks/lapse/wait", session: a}), http.StatusConflict, "not_enqueued")
}
