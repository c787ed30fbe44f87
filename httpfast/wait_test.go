package httpfast

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/clock"
)

// async runs a request on its own goroutine; the channel gets its answer.
func (h *harness) async(c call) <-chan resp {
	ch := make(chan resp, 1)
	go func() {
		r, err := h.try(c)
		if err != nil {
			h.t.Errorf("%s %s: %v", c.method, c.path, err)
		}
		ch <- r
	}()
	return ch
}

func recv(t *testing.T, ch <-chan resp, what string) resp {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer", what)
		return resp{}
	}
}

func TestBlockingAcquireGranted(t *testing.T) {
	h := startHTTP(t, nil)
	a, b := h.session(), h.session()
	r := h.do(call{method: "POST", path: "/v1/locks/k", session: a})
	wantStatus(t, "a acquires", r, http.StatusOK, "ok")
	tokA := r.str("token")

	ch := h.async(call{method: "POST", path: "/v1/locks/k", session: b, body: `{"acquire_timeout_s":30,"lease_ttl_s":7}`})
	h.waitFor(1, 1)
	wantStatus(t, "a releases", h.do(call{method: "DELETE", path: "/v1/locks/k", session: a, body: `{"token":"` + tokA + `"}`}), http.StatusOK, "ok")
	r = recv(t, ch, "b's blocking acquire")
	wantStatus(t, "b's blocking acquire", r, http.StatusOK, "ok")
	if r.num("lease_ttl_s") != 7 || r.str("token") <= tokA {
		t.Fatalf("b got %s; want lease 7 and a token newer than %s", r.raw, tokA)
	}
}

func TestBlockingAcquireTimesOut(t *testing.T) {
	h := startHTTP(t, nil)
	a, b := h.session(), h.session()
	wantStatus(t, "a acquires", h.do(call{method: "POST", path: "/v1/locks/k", session: a}), http.StatusOK, "ok")
	start := time.Now()
	r := h.do(call{method: "POST", path: "/v1/locks/k", session: b, body: `{"acquire_timeout_s":0.2}`})
	wantStatus(t, "b times out", r, http.StatusConflict, "timeout")
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("timeout answered after %v; want >= 200ms", d)
	}
	if _, waiting := h.held(); waiting != 0 {
		t.Fatalf("%d waiters left after the timeout", waiting)
	}
	// The wait kept b's session busy; it is still there.
	wantStatus(t, "b keepalive", h.do(call{method: "POST", path: "/v1/sessions/" + b + "/keepalive"}), http.StatusOK, "ok")
}

func TestBlockingWait(t *testing.T) {
	h := startHTTP(t, nil)
	a, b := h.session(), h.session()
	tokA := h.do(call{method: "POST", path: "/v1/semaphores/s", session: a, body: `{"limit":1}`}).str("token")
	wantStatus(t, "b enqueues", h.do(call{method: "POST", path: "/v1/semaphores/s/enqueue", session: b, body: `{"limit":1}`}), http.StatusOK, "queued")
	ch := h.async(call{method: "POST", path: "/v1/semaphores/s/wait", session: b, body: `{"wait_timeout_s":30}`})
	// Poll for the parked wait: the release must come after it.
	waitParked(t, h, 1)
	wantStatus(t, "a releases", h.do(call{method: "DELETE", path: "/v1/semaphores/s?token=" + tokA, session: a}), http.StatusOK, "ok")
	wantStatus(t, "b's wait", recv(t, ch, "b's wait"), http.StatusOK, "ok")

	r := h.do(call{method: "POST", path: "/v1/semaphores/s/enqueue", session: a, body: `{"limit":1}`})
	wantStatus(t, "a enqueues", r, http.StatusOK, "queued")
	wantStatus(t, "a's wait times out", h.do(call{method: "POST", path: "/v1/semaphores/s/wait", session: a, body: `{"wait_timeout_s":0.1}`}), http.StatusConflict, "timeout")
	wantStatus(t, "entry left the queue", h.do(call{method: "POST", path: "/v1/semaphores/s/wait", session: a}), http.StatusConflict, "not_enqueued")
}

// waitParked polls until n handlers are parked on a grant. The engine's
// queue length cannot tell: an enqueued entry is queued before its wait
// parks.
func waitParked(t *testing.T, h *harness, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.srv.parked.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("parked = %d; want %d", h.srv.parked.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSessionDeleteReleasesAndCancels(t *testing.T) {
	h := startHTTP(t, nil)
	a, b, c := h.session(), h.session(), h.session()
	wantStatus(t, "a holds k1", h.do(call{method: "POST", path: "/v1/locks/k1", session: a}), http.StatusOK, "ok")
	wantStatus(t, "c holds k2", h.do(call{method: "POST", path: "/v1/locks/k2", session: c}), http.StatusOK, "ok")
	wantStatus(t, "b enqueues k2", h.do(call{method: "POST", path: "/v1/locks/k2/enqueue", session: b}), http.StatusOK, "queued")
	aWaits := h.async(call{method: "POST", path: "/v1/locks/k2", session: a, body: `{"acquire_timeout_s":30}`})
	bWaits := h.async(call{method: "POST", path: "/v1/locks/k1", session: b, body: `{"acquire_timeout_s":30}`})
	waitParked(t, h, 2)
	h.waitFor(2, 3)

	wantStatus(t, "delete a", h.do(call{method: "DELETE", path: "/v1/sessions/" + a}), http.StatusOK, "ok")
	wantStatus(t, "a's parked acquire", recv(t, aWaits, "a's parked acquire"), http.StatusGone, "session_gone")
	// a's k1 passed to b, who was waiting for it.
	wantStatus(t, "b gets k1", recv(t, bWaits, "b's acquire"), http.StatusOK, "ok")
	h.waitFor(2, 1) // k1 (b), k2 (c); b's enqueue on k2 still queued
	if st := h.ts.Engine.Snapshot(clock.Now()); len(st.Locks) != 2 || st.Locks[1].Key != "k2" || st.Locks[1].Waiters != 1 {
		t.Fatalf("locks after delete = %+v; want k1 and k2 with one waiter", st.Locks)
	}
}

func TestSessionExpiry(t *testing.T) {
	// The TTL only has to outlast the test's own requests on a loaded
	// machine: the expiry comes from the jump of the engine's clock below.
	const ttl = time.Minute
	h := startHTTP(t, func(c *Config) { c.SessionTTL = ttl })
	a, b := h.session(), h.session()
	wantStatus(t, "a holds k", h.do(call{method: "POST", path: "/v1/locks/k", session: a, body: `{"lease_ttl_s":600}`}), http.StatusOK, "ok")
	wantStatus(t, "a enqueues j", h.do(call{method: "POST", path: "/v1/locks/j/enqueue", session: a}), http.StatusOK, "acquired")
	bWaits := h.async(call{method: "POST", path: "/v1/locks/k", session: b, body: `{"acquire_timeout_s":600}`})
	waitParked(t, h, 1)
	if n := h.srv.Sessions(); n != 2 {
		t.Fatalf("Sessions() = %d; want 2", n)
	}
	// Jump the engine's clock past a's TTL and the session scan. b is
	// busy (its request is parked), so only a expires.
	h.ts.Engine.Expire(clock.Now() + int64(2*ttl))
	wantStatus(t, "b inherits k", recv(t, bWaits, "b's acquire"), http.StatusOK, "ok")
	h.waitFor(1, 0) // a's hold on j went with it
	wantStatus(t, "a is gone", h.do(call{method: "POST", path: "/v1/locks/k", session: a}), http.StatusGone, "session_gone")
	if n := h.srv.Sessions(); n != 1 {
		t.Fatalf("Sessions() after a expired = %d; want 1 (the name must not leak)", n)
	}
}

// TestRegistrySweep checks that names of sessions that expired without
// another request do not pile up.
//
// The TTL is long so that none of the 200 live sessions expires in real
// time while the test opens them (a loaded race-enabled run took over 2 s
// with a 1 s TTL, and the sweep rightly forgot the early ones); the 150
// expire by the jump of the engine's clock.
func TestRegistrySweep(t *testing.T) {
	const ttl = time.Minute
	h := startHTTP(t, func(c *Config) { c.SessionTTL = ttl })
	const n = 150
	for range n {
		h.session()
	}
	h.ts.Engine.Expire(clock.Now() + int64(3*ttl))
	if _, g := h.ts.Engine.Metrics(); g.Sessions != 0 {
		t.Fatalf("engine sessions = %d; want 0", g.Sessions)
	}
	for range 200 {
		h.session()
	}
	// Each create checks two names, so 200 creates have checked all 350
	// names: the 150 expired ones are forgotten.
	if got := h.srv.Sessions(); got != 200 {
		t.Fatalf("registry holds %d names for 200 live sessions; expired ones leaked", got)
	}
}

// TestTCPAndHTTPShareFIFO checks one queue orders TCP connections and
// HTTP sessions together.
func TestTCPAndHTTPShareFIFO(t *testing.T) {
	h := startHTTP(t, nil)
	holder := dialTCP(t, h.ts.Addr)
	holder.send("l", "shared", "0")
	line := holder.read()
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "ok" {
		t.Fatalf("tcp l = %q", line)
	}
	tok0, _ := fence.ParseString(f[1])

	sess := h.session()
	httpWaits := h.async(call{method: "POST", path: "/v1/locks/shared", session: sess, body: `{"acquire_timeout_s":30}`})
	h.waitFor(1, 1)
	tcpWaiter := dialTCP(t, h.ts.Addr)
	tcpWaiter.send("l", "shared", "30")
	h.waitFor(1, 2)

	holder.send("r", "shared", f[1])
	if got := holder.read(); got != "ok" {
		t.Fatalf("tcp r = %q", got)
	}
	r := recv(t, httpWaits, "http waiter")
	wantStatus(t, "http waiter is first", r, http.StatusOK, "ok")
	tok1, _ := fence.ParseString(r.str("token"))
	h.waitFor(1, 1) // the TCP waiter still waits
	wantStatus(t, "http releases", h.do(call{method: "DELETE", path: "/v1/locks/shared", session: sess, body: `{"token":"` + r.str("token") + `"}`}), http.StatusOK, "ok")
	line = tcpWaiter.read()
	f = strings.Fields(line)
	if len(f) != 3 || f[0] != "ok" {
		t.Fatalf("tcp waiter got %q; want ok <token> <ttl>", line)
	}
	tok2, _ := fence.ParseString(f[1])
	if tok0.Compare(tok1) >= 0 || tok1.Compare(tok2) >= 0 {
		t.Fatalf("fences %d, %d, %d not increasing in grant order", tok0.Fence, tok1.Fence, tok2.Fence)
	}
}

func TestStopCancelsParked(t *testing.T) {
	h := startHTTP(t, nil)
	a, b := h.session(), h.session()
	wantStatus(t, "a holds", h.do(call{method: "POST", path: "/v1/locks/k", session: a}), http.StatusOK, "ok")
	bWaits := h.async(call{method: "POST", path: "/v1/locks/k", session: b, body: `{"acquire_timeout_s":60}`})
	waitParked(t, h, 1)
	// Stop fails with ctx's error if the parked request (a 60 s wait)
	// keeps it past ctx's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.srv.Stop(ctx); err != nil {
		t.Fatalf("Stop with a parked request: %v", err)
	}
	wantStatus(t, "parked request", recv(t, bWaits, "parked request"), http.StatusGone, "session_gone")
	if held, waiting := h.held(); held != 0 || waiting != 0 {
		t.Fatalf("after Stop: held %d, waiting %d; want sessions' holdings released", held, waiting)
	}
	if err := h.srv.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestWaitOutlastsServerTimeouts checks a wait longer than the read and
// write timeouts still gets its answer.
//
// The client opens a connection per request: the server's idle timeout is
// its read timeout, and a kept-alive connection picked up just as the
// server closes it for idling fails a POST, which net/http does not retry,
// with "server closed idle connection" or EOF (a race a loaded machine
// widens; it is the client's, not the wait's).
func TestWaitOutlastsServerTimeouts(t *testing.T) {
	const timeout = 250 * time.Millisecond
	h := startHTTP(t, func(c *Config) {
		c.ReadTimeout = timeout
		c.WriteTimeout = timeout
	})
	h.client.CloseIdleConnections()
	h.client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	a, b := h.session(), h.session()
	wantStatus(t, "a holds", h.do(call{method: "POST", path: "/v1/locks/k", session: a}), http.StatusOK, "ok")
	start := time.Now()
	wantStatus(t, "b waits past the timeouts", h.do(call{method: "POST", path: "/v1/locks/k", session: b, body: `{"acquire_timeout_s":1}`}), http.StatusConflict, "timeout")
	if d := time.Since(start); d < 4*timeout {
		t.Fatalf("the wait answered after %v; want its full 1 s, past the %v timeouts", d, timeout)
	}
}
