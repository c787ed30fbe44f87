package httpfast

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/server/servertest"
)

func TestAuth(t *testing.T) {
	h := startHTTP(t, func(c *Config) { c.AuthToken = "s3cret" })
	good := []string{"Authorization", "Bearer s3cret"}
	tests := []struct {
		name     string
		method   string
		path     string
		hdr      []string
		wantCode int
	}{
		{name: "no header", method: "POST", path: "/v1/sessions", wantCode: 401},
		{name: "wrong token", method: "POST", path: "/v1/sessions", hdr: []string{"Authorization", "Bearer nope"}, wantCode: 401},
		{name: "not bearer", method: "POST", path: "/v1/sessions", hdr: []string{"Authorization", "Basic s3cret"}, wantCode: 401},
		{name: "right token", method: "POST", path: "/v1/sessions", hdr: good, wantCode: 201},
		{name: "stats needs auth", method: "GET", path: "/v1/stats", wantCode: 401},
		{name: "metrics needs auth", method: "GET", path: "/metrics", wantCode: 401},
		{name: "metrics with auth", method: "GET", path: "/metrics", hdr: good, wantCode: 200},
		{name: "lock needs auth", method: "POST", path: "/v1/locks/k", wantCode: 401},
		{name: "healthz exempt", method: "GET", path: "/healthz", wantCode: 200},
		{name: "openapi exempt", method: "GET", path: "/v1/openapi.json", wantCode: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(call{method: tt.method, path: tt.path, hdr: tt.hdr, invalid: tt.wantCode == 401})
			if r.status != tt.wantCode {
				t.Fatalf("%s %s = %d %s; want %d", tt.method, tt.path, r.status, r.raw, tt.wantCode)
			}
			if tt.wantCode == 401 && (r.str("error") != "unauthorized" || r.header.Get("WWW-Authenticate") == "") {
				t.Fatalf("401 answer %s, WWW-Authenticate %q", r.raw, r.header.Get("WWW-Authenticate"))
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	h := startHTTP(t, func(c *Config) {
		c.RateLimitPerIP = 0.01 // one token per 100 s: no refill during the test
		c.RateLimitBurst = 3
	})
	for i := range 3 {
		wantStatus(t, "request "+strconv.Itoa(i), h.do(call{method: "GET", path: "/v1/stats"}), http.StatusOK, "")
	}
	r := h.do(call{method: "POST", path: "/v1/sessions"})
	wantStatus(t, "over the limit", r, http.StatusTooManyRequests, "rate_limited")
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 100 {
		t.Fatalf("Retry-After = %q; want 1..100 seconds", r.header.Get("Retry-After"))
	}
	wantStatus(t, "healthz exempt", h.do(call{method: "GET", path: "/healthz"}), http.StatusOK, "ok")
}

func TestStatsHealthzOpenAPI(t *testing.T) {
	h := startHTTP(t, nil)
	tcp := dialTCP(t, h.ts.Addr)
	tcp.send("l", "tcpkey", "0")
	if got := tcp.read(); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("tcp l = %q", got)
	}
	a := h.session()
	h.session()
	wantStatus(t, "acquire", h.do(call{method: "POST", path: "/v1/locks/httpkey", session: a}), http.StatusOK, "ok")
	r := h.do(call{method: "GET", path: "/v1/stats"})
	wantStatus(t, "stats", r, http.StatusOK, "")
	var st struct {
		Connections int `json:"connections"`
		Locks       []struct {
			Key   string `json:"key"`
			Owner uint64 `json:"owner_conn_id"`
		} `json:"locks"`
	}
	if err := json.Unmarshal(r.raw, &st); err != nil {
		t.Fatalf("stats: %v", err)
	}
	if want := h.ts.TCP.Connections() + 2; st.Connections != want {
		t.Fatalf("connections = %d; want TCP connections + 2 sessions = %d", st.Connections, want)
	}
	if len(st.Locks) != 2 || st.Locks[0].Key != "httpkey" || st.Locks[0].Owner&(1<<63) == 0 || st.Locks[1].Owner&(1<<63) != 0 {
		t.Fatalf("locks = %+v; want httpkey owned by a session (top bit) and tcpkey by a connection", st.Locks)
	}

	wantStatus(t, "healthz", h.do(call{method: "GET", path: "/healthz"}), http.StatusOK, "ok")
	r = h.do(call{method: "GET", path: "/v1/openapi.json"})
	if r.status != http.StatusOK || !bytes.Equal(r.raw, OpenAPI()) || r.body["openapi"] != "3.1.0" {
		t.Fatalf("openapi.json = %d, %d bytes; want the embedded 3.1.0 document", r.status, len(r.raw))
	}
}

func TestMetrics(t *testing.T) {
	h := startHTTP(t, nil)
	a := h.session()
	r := h.do(call{method: "POST", path: "/v1/locks/secret-key-name", session: a})
	wantStatus(t, "acquire", r, http.StatusOK, "ok")
	h.do(call{method: "POST", path: "/v1/locks/secret-key-name/renew", session: a, body: `{"token":"` + r.str("token") + `"}`})
	h.do(call{method: "GET", path: "/nowhere"})
	r = h.do(call{method: "GET", path: "/metrics"})
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics = %d %q", r.status, r.header.Get("Content-Type"))
	}
	out := string(r.raw)
	for _, want := range []string{
		"\nlatchd_http_sessions 1\n",
		"\nlatchd_held 1\n",
		"\nlatchd_waiters 0\n",
		"\nlatchd_grants_total 1\n",
		"\nlatchd_renewals_total 1\n",
		"\nlatchd_tcp_connections 0\n",
		`latchd_http_request_duration_seconds_count{route="lock_acquire"} 1`,
		`latchd_http_request_duration_seconds_count{route="lock_renew"} 1`,
		`latchd_http_request_duration_seconds_count{route="session_create"} 1`,
		`latchd_http_request_duration_seconds_count{route="not_found"} 1`,
		`latchd_http_request_duration_seconds_bucket{route="lock_acquire",le="+Inf"} 1`,
		`latchd_http_request_duration_seconds_bucket{route="lock_acquire",le="30"} 1`,
		"# TYPE latchd_http_request_duration_seconds histogram\n",
		"# TYPE latchd_grants_total counter\n",
		"# TYPE latchd_held gauge\n",
		`latchd_http_responses_total{code="201"} 1`,
		`latchd_http_responses_total{code="404"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(out, "secret-key-name") {
		t.Fatalf("a key became a label:\n%s", out)
	}
	if strings.Contains(out, "vmrange") {
		t.Fatalf("metrics use VictoriaMetrics vmrange buckets, which histogram_quantile cannot read")
	}
}

// TestMetricsSharedRegistry checks that WithMetrics records into the
// given registry and that /metrics serves all of it, the TCP side's
// metrics included.
func TestMetricsSharedRegistry(t *testing.T) {
	ts := servertest.StartServer(t)
	reg := metrics.NewRegistry(ts.Engine)
	reg.TCP().Opened() // stands in for a TCP server recording into reg
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	srv, err := New(cfg, backend.NewLocal(ts.Engine), zaptest.NewLogger(t), WithMetrics(reg))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) string {
		t.Helper()
		r, err := hc.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		if err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d, %v", path, r.StatusCode, err)
		}
		return string(b)
	}
	get("/healthz")
	out := get("/metrics")
	for _, want := range []string{
		"\nlatchd_tcp_connections 1\n",
		"# TYPE latchd_tcp_request_duration_seconds histogram\n",
		`latchd_http_request_duration_seconds_count{route="healthz"} 1`,
		"\ngo_goroutines ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The server recorded into reg itself, not into a registry of its own.
	var buf bytes.Buffer
	if _, err := reg.WriteTo(&buf); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if !strings.Contains(buf.String(), `latchd_http_request_duration_seconds_count{route="metrics"} 1`) {
		t.Errorf("the shared registry lacks the /metrics request:\n%s", buf.String())
	}
}

// OpenAPI returns the OpenAPI document served at /v1/openapi.json.
func OpenAPI() []byte { return openAPIDoc }
