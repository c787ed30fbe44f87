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
	stop, addr, err := Serve("127.0.0.1:0", r, zaptest.NewLogger(t))
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
	if _, _, err := Serve("127.0.0.1:0", nil, nil); err == nil {
		t.Fatalf("Serve(nil registry) succeeded")
	}
	if _, _, err := Serve("256.0.0.1:bad", NewRegistry(nil), nil); err == nil {
		t.Fatalf("Serve(bad address) succeeded")
	}
}

// TestServeReadiness: with WithReadiness the metrics port answers
// /healthz and /readyz, which follows the check.
func TestServeReadiness(t *testing.T) {
	var ready atomic.Bool
	stop, addr, err := Serve("127.0.0.1:0", NewRegistry(newTestEngine(t)), zaptest.NewLogger(t),
		WithReadiness(func() error {
			if !ready.Load() {
				return errors.New("tcp listener not accepting yet")
			}
			return nil
		}))
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
