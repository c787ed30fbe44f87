package httpfast

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A request waiting its turn for a large answer (stats, /metrics) gives
// up when the server stops, answering 503 shutting_down: Stop waits for
// every request in flight, and would otherwise wait for answers built two
// at a time for clients that may be long gone.
func TestStopEndsTheWaitForABuildSlot(t *testing.T) {
	h := startHTTP(t, nil)
	slots := h.srv.statsSem
	var rc fasthttp.RequestCtx
	if !h.srv.buildSlot(&rc) {
		t.Fatal("no slot while all are free")
	}
	<-slots
	for range cap(slots) { // every slot busy
		slots <- struct{}{}
	}
	defer func() {
		for range cap(slots) {
			<-slots
		}
	}()
	done := make(chan bool, 1)
	go func() { done <- h.srv.buildSlot(&rc) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.srv.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case got := <-done:
		if got {
			t.Fatal("took a slot while all were busy")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting for a slot 10 s after Stop")
	}
	if code, body := rc.Response.StatusCode(), rc.Response.Body(); code != fasthttp.StatusServiceUnavailable ||
		!bytes.Contains(body, []byte(`"shutting_down"`)) {
		t.Fatalf("answered %d %s; want 503 shutting_down", code, body)
	}
}
