package httpfast

import (
	"net/http"
	"strings"
	"testing"
)

// TestBadInput sends each kind of malformed request while another
// session holds a lock and waits on another key, and checks each gets
// its 4xx in the error shape and disturbs nothing.
func TestBadInput(t *testing.T) {
	h := startHTTP(t, func(c *Config) { c.MaxBodyBytes = 512 })
	holder, other := h.session(), h.session()
	r := h.do(call{method: "POST", path: "/v1/locks/held", session: holder})
	wantStatus(t, "setup acquire", r, http.StatusOK, "ok")
	tok := r.str("token")
	wantStatus(t, "setup enqueue", h.do(call{method: "POST", path: "/v1/locks/held/enqueue", session: other}), http.StatusOK, "queued")
	h.waitFor(1, 1)

	long := strings.Repeat("k", 257)
	tests := []struct {
		name     string
		method   string
		path     string
		session  string
		body     string
		wantCode int
		wantErr  string
	}{
		{name: "malformed JSON", method: "POST", path: "/v1/locks/held", session: other, body: `{"acquire_timeout_s":`, wantCode: 400, wantErr: "bad_request"},
		{name: "not an object", method: "POST", path: "/v1/locks/held", session: other, body: `[1,2]`, wantCode: 400, wantErr: "bad_request"},
		{name: "wrong type", method: "POST", path: "/v1/locks/held", session: other, body: `{"acquire_timeout_s":"5"}`, wantCode: 400, wantErr: "bad_request"},
		{name: "negative timeout", method: "POST", path: "/v1/locks/held", session: other, body: `{"acquire_timeout_s":-1}`, wantCode: 400, wantErr: "bad_request"},
		{name: "negative wait timeout", method: "POST", path: "/v1/locks/held/wait", session: other, body: `{"wait_timeout_s":-0.5}`, wantCode: 400, wantErr: "bad_request"},
		{name: "zero lease", method: "POST", path: "/v1/locks/held", session: other, body: `{"lease_ttl_s":0}`, wantCode: 400, wantErr: "bad_request"},
		{name: "huge timeout", method: "POST", path: "/v1/locks/held", session: other, body: `{"acquire_timeout_s":1e300}`, wantCode: 400, wantErr: "bad_request"},
		{name: "number overflow", method: "POST", path: "/v1/locks/held", session: other, body: `{"acquire_timeout_s":1e400}`, wantCode: 400, wantErr: "bad_request"},
		{name: "unknown field", method: "POST", path: "/v1/locks/held", session: other, body: `{"acquire_timeout_s":0,"ttl":5}`, wantCode: 400, wantErr: "bad_request"},
		{name: "limit on a lock", method: "POST", path: "/v1/locks/held", session: other, body: `{"limit":1}`, wantCode: 400, wantErr: "bad_request"},
		{name: "token on acquire", method: "POST", path: "/v1/locks/held", session: other, body: `{"token":"` + tok + `"}`, wantCode: 400, wantErr: "bad_request"},
		{name: "trailing data", method: "POST", path: "/v1/locks/held", session: other, body: `{} {}`, wantCode: 400, wantErr: "bad_request"},
		{name: "semaphore without limit", method: "POST", path: "/v1/semaphores/s", session: other, body: `{}`, wantCode: 400, wantErr: "bad_request"},
		{name: "semaphore limit 0", method: "POST", path: "/v1/semaphores/s", session: other, body: `{"limit":0}`, wantCode: 400, wantErr: "bad_request"},
		{name: "semaphore fractional limit", method: "POST", path: "/v1/semaphores/s", session: other, body: `{"limit":1.5}`, wantCode: 400, wantErr: "bad_request"},
		{name: "semaphore enqueue without limit", method: "POST", path: "/v1/semaphores/s/enqueue", session: other, wantCode: 400, wantErr: "bad_request"},
		{name: "release without token", method: "DELETE", path: "/v1/locks/held", session: other, wantCode: 400, wantErr: "bad_request"},
		{name: "release bad token", method: "DELETE", path: "/v1/locks/held", session: other, body: `{"token":"XYZ"}`, wantCode: 400, wantErr: "bad_request"},
		{name: "release uppercase token", method: "DELETE", path: "/v1/locks/held", session: other, body: `{"token":"` + strings.ToUpper(tok) + `"}`, wantCode: 400, wantErr: "bad_request"},
		{name: "release tokens differ", method: "DELETE", path: "/v1/locks/held?token=" + strings.Repeat("0", 32), session: other, body: `{"token":"` + tok + `"}`, wantCode: 400, wantErr: "bad_request"},
		{name: "renew without token", method: "POST", path: "/v1/locks/held/renew", session: other, body: `{"lease_ttl_s":5}`, wantCode: 400, wantErr: "bad_request"},
		{name: "release with other's token", method: "DELETE", path: "/v1/locks/held", session: other, body: `{"token":"` + strings.Repeat("0", 32) + `"}`, wantCode: 409, wantErr: "not_holder"},
		{name: "missing session", method: "POST", path: "/v1/locks/held", wantCode: 400, wantErr: "session_required"},
		{name: "missing session on release", method: "DELETE", path: "/v1/locks/held?token=" + tok, wantCode: 400, wantErr: "session_required"},
		{name: "unknown session", method: "POST", path: "/v1/locks/held", session: strings.Repeat("a", 32), wantCode: 410, wantErr: "session_gone"},
		{name: "short session id", method: "POST", path: "/v1/locks/held", session: "abc", wantCode: 410, wantErr: "session_gone"},
		{name: "key with space", method: "POST", path: "/v1/locks/a%20b", session: other, wantCode: 400, wantErr: "bad_request"},
		{name: "key with tab", method: "POST", path: "/v1/locks/a%09b", session: other, wantCode: 400, wantErr: "bad_request"},
		{name: "key with newline", method: "POST", path: "/v1/locks/a%0Ab", session: other, wantCode: 400, wantErr: "bad_request"},
		{name: "key too long", method: "POST", path: "/v1/locks/" + long, session: other, wantCode: 400, wantErr: "bad_request"},
		{name: "bad percent-encoding", method: "POST", path: "/v1/locks/a%zz", session: other, wantCode: 400, wantErr: "bad_request"},
		{name: "truncated percent-encoding", method: "POST", path: "/v1/locks/a%2", session: other, wantCode: 400, wantErr: "bad_request"},
		{name: "session create with field", method: "POST", path: "/v1/sessions", body: `{"ttl_s":5}`, wantCode: 400, wantErr: "bad_request"},
		{name: "body too large", method: "POST", path: "/v1/locks/held", session: other, body: `{"acquire_timeout_s":0` + strings.Repeat(" ", 600) + `}`, wantCode: 413, wantErr: "body_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(call{method: tt.method, path: tt.path, session: tt.session, body: tt.body, invalid: true})
			if r.status != tt.wantCode || r.str("error") != tt.wantErr {
				t.Fatalf("%s %s %s = %d %s; want %d %q", tt.method, tt.path, tt.body, r.status, r.raw, tt.wantCode, tt.wantErr)
			}
			checkErrorShape(t, r.raw)
		})
	}

	// Nothing moved: the holder still holds (its token renews), the
	// enqueued session still waits, and a 256-byte key is fine.
	if held, waiting := h.held(); held != 1 || waiting != 1 {
		t.Fatalf("after bad input: held %d, waiting %d; want 1, 1", held, waiting)
	}
	wantStatus(t, "holder renews", h.do(call{method: "POST", path: "/v1/locks/held/renew", session: holder, body: `{"token":"` + tok + `"}`}), http.StatusOK, "ok")
	wantStatus(t, "256-byte key", h.do(call{method: "POST", path: "/v1/locks/" + long[:256], session: other}), http.StatusOK, "ok")
	wantStatus(t, "encoded slash in key", h.do(call{method: "POST", path: "/v1/locks/a%2Fb", session: other}), http.StatusOK, "ok")
	st := h.ts.Engine.Snapshot(0)
	found := false
	for _, l := range st.Locks {
		found = found || l.Key == "a/b"
	}
	if !found {
		t.Fatalf("locks %+v lack the decoded key a/b", st.Locks)
	}
}

func TestRouting(t *testing.T) {
	h := startHTTP(t, nil)
	tests := []struct {
		name      string
		method    string
		path      string
		wantCode  int
		wantAllow string
	}{
		{name: "unknown path", method: "GET", path: "/nope", wantCode: 404},
		{name: "unknown v1 path", method: "GET", path: "/v1/nope", wantCode: 404},
		{name: "unknown lock subroute", method: "POST", path: "/v1/locks/k/steal", wantCode: 404},
		{name: "too deep", method: "POST", path: "/v1/locks/k/renew/x", wantCode: 404},
		{name: "empty key", method: "POST", path: "/v1/locks/", wantCode: 404},
		{name: "empty session id", method: "DELETE", path: "/v1/sessions/", wantCode: 404},
		{name: "unknown session subroute", method: "POST", path: "/v1/sessions/x/y", wantCode: 404},
		{name: "PATCH a lock", method: "PATCH", path: "/v1/locks/k", wantCode: 405, wantAllow: "GET, POST, DELETE"},
		{name: "PUT a semaphore", method: "PUT", path: "/v1/semaphores/k", wantCode: 405, wantAllow: "GET, POST, DELETE"},
		{name: "GET renew", method: "GET", path: "/v1/locks/k/renew", wantCode: 405, wantAllow: "POST"},
		{name: "DELETE wait", method: "DELETE", path: "/v1/semaphores/k/wait", wantCode: 405, wantAllow: "POST"},
		{name: "GET sessions", method: "GET", path: "/v1/sessions", wantCode: 405, wantAllow: "POST"},
		{name: "POST session", method: "POST", path: "/v1/sessions/abc", wantCode: 405, wantAllow: "DELETE"},
		{name: "GET keepalive", method: "GET", path: "/v1/sessions/abc/keepalive", wantCode: 405, wantAllow: "POST"},
		{name: "POST stats", method: "POST", path: "/v1/stats", wantCode: 405, wantAllow: "GET"},
		{name: "POST healthz", method: "POST", path: "/healthz", wantCode: 405, wantAllow: "GET"},
		{name: "DELETE metrics", method: "DELETE", path: "/metrics", wantCode: 405, wantAllow: "GET"},
		{name: "PUT openapi", method: "PUT", path: "/v1/openapi.json", wantCode: 405, wantAllow: "GET"},
		{name: "POST readyz", method: "POST", path: "/readyz", wantCode: 405, wantAllow: "GET"},
		{name: "POST ui keys", method: "POST", path: "/v1/ui/keys", wantCode: 405, wantAllow: "GET"},
		{name: "POST ui", method: "POST", path: "/ui/", wantCode: 405, wantAllow: "GET"},
		{name: "unknown ui file", method: "GET", path: "/ui/nope.js", wantCode: 404},
		{name: "ui prefix only", method: "GET", path: "/uix", wantCode: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(call{method: tt.method, path: tt.path, invalid: true})
			want := map[int]string{404: "not_found", 405: "method_not_allowed"}[tt.wantCode]
			if r.status != tt.wantCode || r.str("error") != want {
				t.Fatalf("%s %s = %d %s; want %d %s", tt.method, tt.path, r.status, r.raw, tt.wantCode, want)
			}
			if got := r.header.Get("Allow"); got != tt.wantAllow {
				t.Fatalf("Allow = %q; want %q", got, tt.wantAllow)
			}
			checkErrorShape(t, r.raw)
		})
	}
}
