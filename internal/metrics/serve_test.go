package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

func TestServe(t *testing.T) {
	eng := newTestEngine(t)
	r := NewRegistry(eng)
	r.TCP().Opened()
	stop, addr, err := Serve("127.0.0.1:0", r, zaptest.NewLogger(t), ServeConfig{})
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = stop(context.Background())
		}
	})
	url := "http://" + addr + "/metrics"
	hc := &http.Client{Timeout: 5 * time.Second}

	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics = %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"\nlatchd_tcp_connections 1\n", "# TYPE latchd_tcp_request_duration_seconds histogram\n", "\nlatchd_keys 0\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}

	resp, err = hc.Post(url, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics = %d; want 405", resp.StatusCode)
	}
	resp, err = hc.Get("http://" + addr + "/other")
	if err != nil {
		t.Fatalf("GET /other: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other = %d; want 404", resp.StatusCode)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	stopped = true
	if _, err := hc.Get(url); err == nil {
		t.Fatalf("GET after stop succeeded")
	}
}

func TestServeErrors(t *testing.T) {
	if _, _, err := Serve("127.0.0.1:0", nil, nil, ServeConfig{}); err == nil {
		t.Fatalf("Serve(nil registry) succeeded")
	}
	if _, _, err := Serve("256.0.0.1:bad", NewRegistry(nil), nil, ServeConfig{}); err == nil {
		t.Fatalf("Serve(bad address) succeeded")
	}
}

// TestServeReadiness: with Ready set the metrics port answers
// /healthz and /readyz, which follows the check.
func TestServeReadiness(t *testing.T) {
	var ready atomic.Bool
	stop, addr, err := Serve("127.0.0.1:0", NewRegistry(newTestEngine(t)), zaptest.NewLogger(t),
		ServeConfig{Ready: func() error {
			if !ready.Load() {
				return errors.New("tcp listener not accepting yet")
			}
			return nil
		}})
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() { _ = stop(context.Background()) })
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not accepting yet") {
		t.Fatalf("/readyz before ready = %d %s", code, body)
	}
	ready.Store(true)
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz when ready = %d %s", code, body)
	}
}

// TestServeBearer: with a bearer token, /metrics answers 401 without it or
// with a wrong one, and the metrics with it.
func TestServeBearer(t *testing.T) {
	stop, addr, err := Serve("127.0.0.1:0", NewRegistry(newTestEngine(t)), zaptest.NewLogger(t), ServeConfig{BearerToken: "s3cret"})
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() { _ = stop(context.Background()) })
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, tt := range []struct {
		name, auth string
		want       int
	}{
		{name: "no token", want: http.StatusUnauthorized},
		{name: "wrong token", auth: "Bearer nope", want: http.StatusUnauthorized},
		{name: "bare token", auth: "s3cret", want: http.StatusUnauthorized},
		{name: "right token", auth: "Bearer s3cret", want: http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("GET /metrics with %q = %d; want %d", tt.auth, resp.StatusCode, tt.want)
			}
			if leaked := strings.Contains(string(body), "latchd_keys"); leaked != (tt.want == http.StatusOK) {
				t.Fatalf("body %q: metrics shown = %v", body, leaked)
			}
		})
	}
}
