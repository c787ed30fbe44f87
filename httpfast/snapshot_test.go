package httpfast

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/server/servertest"
)

// TestSnapshotRoute: WithSnapshot alone (a single node) serves GET
// /v1/admin/snapshot behind the admin token, and no cluster route; a
// backend error answers as elsewhere (503 not_leader).
func TestSnapshotRoute(t *testing.T) {
	ts := servertest.StartServer(t)
	var failing atomic.Bool
	snap := func(context.Context) ([]byte, error) {
		if failing.Load() {
			return nil, &backend.NotLeaderError{}
		}
		return []byte("LTCHBKUP..."), nil
	}
	if _, err := New(DefaultConfig(), backend.NewLocal(ts.Engine), zap.NewNop(), WithSnapshot(snap, "")); err == nil {
		t.Fatal("New accepted WithSnapshot without a token")
	}
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	srv, err := New(cfg, backend.NewLocal(ts.Engine), zap.NewNop(), WithSnapshot(snap, testAdminToken))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	hc := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+srv.Addr()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		method, path, token string
		want                int
		body                string
	}{
		{"GET", "/v1/admin/snapshot", "", 401, "unauthorized"},
		{"GET", "/v1/admin/snapshot", "wrong", 401, "unauthorized"},
		{"GET", "/v1/admin/snapshot", testAdminToken, 200, "LTCHBKUP..."},
		{"POST", "/v1/admin/snapshot", testAdminToken, 405, "method_not_allowed"},
		{"GET", "/v1/admin/cluster", testAdminToken, 404, "not_found"},
		{"DELETE", "/v1/admin/voters/n1", testAdminToken, 404, "not_found"},
	} {
		if code, body := do(c.method, c.path, c.token); code != c.want || !strings.Contains(body, c.body) {
			t.Errorf("%s %s: %d %q; want %d with %q", c.method, c.path, code, body, c.want, c.body)
		}
	}
	failing.Store(true)
	if code, body := do("GET", "/v1/admin/snapshot", testAdminToken); code != 503 || !strings.Contains(body, "not_leader") {
		t.Errorf("snapshot on a node without a leader: %d %q; want 503 not_leader", code, body)
	}
}
