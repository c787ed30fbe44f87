package httpfast

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sseReader reads Server-Sent Events as "kind key owner_kind holders waiters".
type sseReader struct {
	t  *testing.T
	br *bufio.Reader
}

func (r *sseReader) next() string {
	r.t.Helper()
	var kind, data string
	for {
		line, err := r.br.ReadString('\n')
		if err != nil {
			r.t.Fatalf("stream: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			kind = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		case line == "" && kind != "":
			var ev watchEvent
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				r.t.Fatalf("event %s data %q: %v", kind, data, err)
			}
			if ev.Kind != kind {
				r.t.Fatalf("event %s carries kind %s", kind, ev.Kind)
			}
			return strings.Join([]string{ev.Kind, ev.Key, ev.OwnerKind, itoa(ev.Holders), itoa(ev.Waiters)}, " ")
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestWatchSSE: GET /v1/watch/{key} streams the key's state and then its
// events as Server-Sent Events.
func TestWatchSSE(t *testing.T) {
	h := startHTTP(t, nil)
	a, b := h.session(), h.session()
	resp, err := h.client.Get(h.base + "/v1/watch/k")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("watch: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := &sseReader{t: t, br: bufio.NewReader(resp.Body)}
	for _, want := range []string{"state k - 0 0", "synced k - 0 0"} {
		if got := r.next(); got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	}
	tok := h.do(call{method: "POST", path: "/v1/locks/k", session: a}).str("token")
	go h.do(call{method: "POST", path: "/v1/locks/k", session: b, body: `{"acquire_timeout_s":10}`})
	for _, want := range []string{"granted k session 1 0", "waiters k - 1 1"} {
		if got := r.next(); got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	}
	wantStatus(t, "release", h.do(call{method: "DELETE", path: "/v1/locks/k?token=" + tok, session: a}), http.StatusOK, "ok")
	for _, want := range []string{"released k session 0 1", "granted k session 1 0"} {
		if got := r.next(); got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	}
	wantStatus(t, "bad prefix", h.do(call{method: "GET", path: "/v1/watch/k?prefix=2", invalid: true}), http.StatusBadRequest, "bad_request")
}

// TestWatchLongPoll: GET /v1/watch/{key}?fence=F answers once the key is
// no longer held with F, and 409 timeout while it still is.
func TestWatchLongPoll(t *testing.T) {
	h := startHTTP(t, nil)
	a := h.session()
	tok := h.do(call{method: "POST", path: "/v1/locks/k", session: a}).str("token")
	fence := tok[:16]
	wantStatus(t, "held, timeout 0", h.do(call{method: "GET", path: "/v1/watch/k?fence=" + fence}), http.StatusConflict, "timeout")
	r := h.do(call{method: "GET", path: "/v1/watch/k?fence=0000000000000001&timeout_s=5"})
	if ev, _ := r.body["event"].(map[string]any); r.status != http.StatusOK || ev["kind"] != "state" || ev["fence"] != fence {
		t.Fatalf("another fence: %d %s", r.status, r.raw)
	}
	done := make(chan resp, 1)
	go func() { done <- h.do(call{method: "GET", path: "/v1/watch/k?fence=" + fence + "&timeout_s=20"}) }()
	select {
	case r := <-done:
		t.Fatalf("answered while held: %s", r.raw)
	case <-time.After(50 * time.Millisecond):
	}
	wantStatus(t, "release", h.do(call{method: "DELETE", path: "/v1/locks/k?token=" + tok, session: a}), http.StatusOK, "ok")
	r = <-done
	if ev, _ := r.body["event"].(map[string]any); r.status != http.StatusOK || r.str("status") != "changed" || ev["kind"] != "released" || ev["fence"] != fence {
		t.Fatalf("after the release: %d %s", r.status, r.raw)
	}
	wantStatus(t, "bad fence", h.do(call{method: "GET", path: "/v1/watch/k?fence=xyz", invalid: true}), http.StatusBadRequest, "bad_request")
}
