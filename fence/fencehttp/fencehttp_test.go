package fencehttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/fence/fencehttp"
)

func TestHandler(t *testing.T) {
	g := fence.NewGuard()
	var seen []uint64
	h := fencehttp.Handler(g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := fencehttp.FromContext(r.Context())
		if !ok {
			t.Error("no token in the handler's context")
		}
		seen = append(seen, tok.Fence)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	tests := []struct {
		name   string
		header string // "" sends none
		path   string
		want   int
	}{
		{name: "first holder", header: fence.Token{Fence: 10, Salt: 1}.String(), path: "/a", want: http.StatusNoContent},
		{name: "newer holder", header: fence.Token{Fence: 12, Salt: 2}.String(), path: "/a", want: http.StatusNoContent},
		{name: "zombie", header: fence.Token{Fence: 10, Salt: 1}.String(), path: "/a", want: http.StatusConflict},
		{name: "other resource", header: fence.Token{Fence: 10, Salt: 1}.String(), path: "/b", want: http.StatusNoContent},
		{name: "missing", path: "/a", want: http.StatusBadRequest},
		{name: "malformed", header: "not-a-token", path: "/a", want: http.StatusBadRequest},
		{name: "uppercase", header: "000000000000000C0000000000000002", path: "/a", want: http.StatusBadRequest},
		{name: "zero", header: fence.Token{}.String(), path: "/a", want: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPut, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				tok, err := fence.ParseString(tt.header)
				if err == nil {
					fencehttp.SetHeader(req, tok)
				} else {
					req.Header.Set(fence.Header, tt.header)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
	if want := []uint64{10, 12, 10}; len(seen) != len(want) || seen[0] != 10 || seen[1] != 12 || seen[2] != 10 {
		t.Fatalf("handler saw fences %v, want %v", seen, want)
	}
}

func TestMiddlewareResource(t *testing.T) {
	g := fence.NewGuard()
	h := fencehttp.Middleware(g, fencehttp.WithResource(func(*http.Request) string { return "db" }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, c := range []struct {
		path  string
		fence uint64
		want  int
	}{{"/x", 5, http.StatusOK}, {"/y", 4, http.StatusConflict}} {
		req := httptest.NewRequest(http.MethodPost, c.path, nil)
		fencehttp.SetHeader(req, fence.Token{Fence: c.fence, Salt: 9})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Fatalf("%s fence %d: status %d, want %d", c.path, c.fence, rec.Code, c.want)
		}
	}
	if g.Mark("db") != 5 {
		t.Fatalf("mark %d, want 5", g.Mark("db"))
	}
}
