package httpfast

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
)

// TestGetLockHoldersAndWaiters: GET /v1/locks/{key} names the holder and
// the waiters in queue order, with owner ids as exact decimal strings (a
// session's id has its top bit set, which a float64 would round).
func TestGetLockHoldersAndWaiters(t *testing.T) {
	h := startHTTP(t, nil)
	a, b := h.session(), h.session()
	r := h.do(call{method: "POST", path: "/v1/locks/job%2F1", session: a})
	wantStatus(t, "acquire", r, http.StatusOK, "ok")
	fenceHex := r.str("token")[:16]
	tcp := dialTCP(t, h.ts.Addr)
	tcp.send("l", "job/1", "30") // queued behind the session
	h.waitFor(1, 1)
	done := make(chan resp, 1)
	go func() {
		r, _ := h.try(call{method: "POST", path: "/v1/locks/job%2F1", session: b, body: `{"acquire_timeout_s":30}`})
		done <- r
	}()
	h.waitFor(1, 2)

	r = h.do(call{method: "GET", path: "/v1/locks/job%2F1"})
	wantStatus(t, "get", r, http.StatusOK, "")
	holders, _ := r.body["holders"].([]any)
	waiters, _ := r.body["waiters"].([]any)
	if r.body["exists"] != true || r.str("kind") != "lock" || r.num("limit") != 1 || len(holders) != 1 || len(waiters) != 2 {
		t.Fatalf("GET = %s", r.raw)
	}
	hd := holders[0].(map[string]any)
	owner, err := strconv.ParseUint(hd["owner"].(string), 10, 64)
	if err != nil || owner&(1<<63) == 0 || hd["fence"] != fenceHex {
		t.Fatalf("holder = %v; want a session owner (top bit) as an exact string, fence %s", hd, fenceHex)
	}
	st := h.do(call{method: "GET", path: "/v1/stats"})
	if !strings.Contains(string(st.raw), `"owner_conn_id_str":"`+hd["owner"].(string)+`"`) {
		t.Fatalf("stats lacks owner_conn_id_str %s: %s", hd["owner"], st.raw)
	}
	w0 := waiters[0].(map[string]any)
	if w0["owner"] == hd["owner"] || w0["wait_expires_in_s"] == nil {
		t.Fatalf("first waiter = %v", w0)
	}
	if r := h.do(call{method: "GET", path: "/v1/semaphores/job%2F1"}); r.str("kind") != "lock" {
		t.Fatalf("GET via the semaphore route = %s; want the key's own kind", r.raw)
	}
	r = h.do(call{method: "GET", path: "/v1/semaphores/never"})
	if r.status != http.StatusOK || r.body["exists"] != false || r.str("kind") != "semaphore" {
		t.Fatalf("GET an unknown key = %d %s", r.status, r.raw)
	}
	wantStatus(t, "bad key", h.do(call{method: "GET", path: "/v1/locks/a%20b"}), http.StatusBadRequest, "bad_request")

	wantStatus(t, "delete a", h.do(call{method: "DELETE", path: "/v1/sessions/" + a}), http.StatusOK, "ok")
	if got := tcp.read(); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("tcp waiter = %q", got)
	}
	_ = tcp.c.Close()
	if r := <-done; r.status != http.StatusOK {
		t.Fatalf("session b = %d %s", r.status, r.raw)
	}
}

// TestUIKeys: GET /v1/ui/keys lists the busiest keys in use, searches by
// substring, caps the list, and checks its parameters.
func TestUIKeys(t *testing.T) {
	h := startHTTP(t, nil)
	for i := range 30 {
		c := dialTCP(t, h.ts.Addr)
		c.send("l", "batch/"+strconv.Itoa(i), "0")
		c.read()
	}
	hot := dialTCP(t, h.ts.Addr)
	hot.send("l", "hot", "0")
	hot.read()
	w := dialTCP(t, h.ts.Addr)
	w.send("l", "hot", "30")
	h.waitFor(31, 1)

	r := h.do(call{method: "GET", path: "/v1/ui/keys?limit=5"})
	wantStatus(t, "ui keys", r, http.StatusOK, "")
	keys, _ := r.body["keys"].([]any)
	if r.num("matched") != 31 || len(keys) != 5 || keys[0].(map[string]any)["key"] != "hot" {
		t.Fatalf("ui keys = %s", r.raw)
	}
	tot := r.body["totals"].(map[string]any)
	if tot["held"] != 31.0 || tot["waiting"] != 1.0 || tot["connections"].(float64) < 32 || tot["last_fence"] == "" {
		t.Fatalf("totals = %v", tot)
	}
	r = h.do(call{method: "GET", path: "/v1/ui/keys?q=batch%2F2"})
	keys, _ = r.body["keys"].([]any)
	if r.num("matched") != 11 || len(keys) != 11 { // batch/2, batch/20..29
		t.Fatalf("search = %s", r.raw)
	}
	for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "q=" + strings.Repeat("a", 257)} {
		wantStatus(t, bad, h.do(call{method: "GET", path: "/v1/ui/keys?" + bad, invalid: true}), http.StatusBadRequest, "bad_request")
	}
}

// TestUIAuthAndFiles: the page and its files load without the token (they
// hold no data) under a strict CSP; the data routes need it.
func TestUIAuthAndFiles(t *testing.T) {
	h := startHTTP(t, func(c *Config) { c.AuthToken = "tok" })
	for _, p := range []string{"/ui/", "/ui/index.html", "/ui/app.js", "/ui/style.css"} {
		r := h.do(call{method: "GET", path: p})
		if r.status != http.StatusOK || len(r.raw) == 0 || !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Fatalf("GET %s = %d, CSP %q", p, r.status, r.header.Get("Content-Security-Policy"))
		}
	}
	page := h.do(call{method: "GET", path: "/ui/"})
	if strings.Contains(string(page.raw), "http://") || strings.Contains(string(page.raw), "https://") {
		t.Fatal("the page refers to another origin; it must work offline")
	}
	h.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if r := h.do(call{method: "GET", path: "/ui"}); r.status != http.StatusMovedPermanently || r.header.Get("Location") != "/ui/" {
		t.Fatalf("GET /ui = %d %q", r.status, r.header.Get("Location"))
	}
	for _, p := range []string{"/v1/ui/keys", "/v1/locks/k", "/v1/semaphores/k"} {
		wantStatus(t, p, h.do(call{method: "GET", path: p}), http.StatusUnauthorized, "unauthorized")
		wantStatus(t, p, h.do(call{method: "GET", path: p, hdr: []string{"Authorization", "Bearer tok"}}), http.StatusOK, "")
	}
}

// TestReadyz: /readyz is exempt from auth, 200 when ready and 503 with
// the reason when the readiness check fails.
func TestReadyz(t *testing.T) {
	h := startHTTP(t, func(c *Config) { c.AuthToken = "tok" })
	wantStatus(t, "readyz", h.do(call{method: "GET", path: "/readyz"}), http.StatusOK, "ok")

	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	notYet := errors.New("tcp listener not accepting")
	srv, err := New(cfg, backend.NewLocal(h.ts.Engine), zaptest.NewLogger(t), WithReadiness(func() error { return notYet }))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(t.Context()) })
	h2 := &harness{t: t, srv: srv, base: "http://" + srv.Addr(), client: &http.Client{Timeout: 5 * time.Second}, router: h.router}
	h2.router = openAPIRouter(t, h2.base)
	r := h2.do(call{method: "GET", path: "/readyz"})
	wantStatus(t, "readyz not ready", r, http.StatusServiceUnavailable, "unavailable")
	if !strings.Contains(r.str("message"), notYet.Error()) {
		t.Fatalf("readyz message = %q", r.str("message"))
	}
}

// TestClusterUIKeysAndReadyz: in cluster mode every node answers the
// dashboard's routes from its replica, with its raft status, and /readyz
// once it knows the leader and has applied its log.
func TestClusterUIKeysAndReadyz(t *testing.T) {
	rc := startRESTCluster(t, nil, 60*time.Second)
	lm, lh := rc.leader()
	sid := lh.session()
	wantStatus(t, "acquire", lh.do(call{method: "POST", path: "/v1/locks/ui-job", session: sid}), http.StatusOK, "ok")
	for _, m := range rc.followers(lm) {
		fh := rc.h(m)
		waitCounts(t, m, 1, 0)
		wantStatus(t, "readyz on "+m.ID, fh.do(call{method: "GET", path: "/readyz"}), http.StatusOK, "ok")
		r := fh.do(call{method: "GET", path: "/v1/ui/keys"})
		cl, _ := r.body["cluster"].(map[string]any)
		keys, _ := r.body["keys"].([]any)
		if cl["role"] != "follower" || cl["leader_id"] != lm.ID || len(keys) != 1 || keys[0].(map[string]any)["key"] != "ui-job" {
			t.Fatalf("ui keys on follower %s = %s", m.ID, r.raw)
		}
		r = fh.do(call{method: "GET", path: "/v1/locks/ui-job"})
		if hs, _ := r.body["holders"].([]any); r.status != http.StatusOK || len(hs) != 1 {
			t.Fatalf("GET the lock on follower %s = %d %s", m.ID, r.status, r.raw)
		}
	}
	r := lh.do(call{method: "GET", path: "/v1/ui/keys"})
	if cl, _ := r.body["cluster"].(map[string]any); cl["role"] != "leader" {
		t.Fatalf("ui keys on the leader = %s", r.raw)
	}
}

// TestGetLockListsAreCapped: GET /v1/locks/{key} of a key with more
// waiters than keyListMax lists the first keyListMax, in queue order, and
// the totals, so a hot key cannot make every reader build megabytes.
func TestGetLockListsAreCapped(t *testing.T) {
	h := startHTTP(t, nil)
	const n = keyListMax + 50
	for i := range n {
		req := engine.AcquireReq{Key: []byte("hot"), Owner: engine.OwnerID(i + 1), Limit: 1}
		if _, err := h.ts.Engine.Enqueue(clock.Now(), req); err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
	}
	r := h.do(call{method: "GET", path: "/v1/locks/hot"})
	wantStatus(t, "get", r, http.StatusOK, "")
	holders, _ := r.body["holders"].([]any)
	waiters, _ := r.body["waiters"].([]any)
	if len(holders) != 1 || len(waiters) != keyListMax || r.num("holders_total") != 1 ||
		r.num("waiters_total") != n-1 || r.body["truncated"] != true {
		t.Fatalf("GET lists %d holders, %d waiters, totals %v/%v, truncated %v; want 1, %d, 1/%d, true (%d bytes)",
			len(holders), len(waiters), r.body["holders_total"], r.body["waiters_total"], r.body["truncated"],
			keyListMax, n-1, len(r.raw))
	}
	if w0 := waiters[0].(map[string]any); w0["owner"] != "2" {
		t.Fatalf("first waiter = %v; want owner 2 (queue order)", w0)
	}
	r = h.do(call{method: "GET", path: "/v1/locks/other"})
	if _, ok := r.body["truncated"]; ok || r.num("waiters_total") != 0 {
		t.Fatalf("GET of an unknown key = %s", r.raw)
	}
}
