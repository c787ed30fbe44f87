package httpfast

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// parkRaw sends a blocking request for session on a connection of its own
// and returns the connection, for the test to drop as a client that gives
// up would (curl --max-time).
func parkRaw(t *testing.T, addr, session, path, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: latchd\r\nX-Latchd-Session: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, session, len(body), body)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientGoneLeavesQueue: a client that closes its connection while
// its blocking acquire waits (curl --max-time 1 with acquire_timeout_s
// 20) leaves the queue promptly, and the lock goes to the next waiter
// when it is released, not to the abandoned session.
func TestClientGoneLeavesQueue(t *testing.T) {
	if !canWatch {
		t.Skip("no peerGone on this platform")
	}
	h := startHTTP(t, nil)
	a, b, c := h.session(), h.session(), h.session()
	r := h.do(call{method: "POST", path: "/v1/locks/k", session: a})
	wantStatus(t, "a acquires", r, http.StatusOK, "ok")
	tokA := r.str("token")

	conn := parkRaw(t, h.srv.Addr(), b, "/v1/locks/k", `{"acquire_timeout_s":20}`)
	waitParked(t, h, 1)
	h.waitFor(1, 1)
	_ = conn.Close()
	waitParked(t, h, 0) // b's handler gave up well before its 20 s
	h.waitFor(1, 0)

	ch := h.async(call{method: "POST", path: "/v1/locks/k", session: c, body: `{"acquire_timeout_s":20}`})
	h.waitFor(1, 1)
	wantStatus(t, "a releases", h.do(call{method: "DELETE", path: "/v1/locks/k", session: a, body: `{"token":"` + tokA + `"}`}), http.StatusOK, "ok")
	wantStatus(t, "c's blocking acquire", recv(t, ch, "c's blocking acquire"), http.StatusOK, "ok")
}

// TestClientGoneRacesGrant: a client closes its connection just before
// the lock it waits for is released, too soon for the watch to have
// looked: whether the withdrawal or the grant comes first, the grant does
// not stay with the abandoned session, and the waiter behind gets the
// lock at once rather than after the session TTL. Repeated to hit both
// orders.
func TestClientGoneRacesGrant(t *testing.T) {
	if !canWatch {
		t.Skip("no peerGone on this platform")
	}
	h := startHTTP(t, nil)
	for i := range 5 {
		a, b, c := h.session(), h.session(), h.session()
		key := fmt.Sprint("/v1/locks/race", i)
		r := h.do(call{method: "POST", path: key, session: a})
		wantStatus(t, "a acquires", r, http.StatusOK, "ok")
		conn := parkRaw(t, h.srv.Addr(), b, key, `{"acquire_timeout_s":20}`)
		waitParked(t, h, 1)
		ch := h.async(call{method: "POST", path: key, session: c, body: `{"acquire_timeout_s":20}`})
		waitParked(t, h, 2)
		_ = conn.Close()
		wantStatus(t, "a releases", h.do(call{method: "DELETE", path: key, session: a, body: `{"token":"` + r.str("token") + `"}`}), http.StatusOK, "ok")
		// recv's deadline (10 s) comes well before b's session TTL (60 s)
		// and c's own wait (20 s) end.
		wantStatus(t, "c's blocking acquire", recv(t, ch, "c's blocking acquire"), http.StatusOK, "ok")
		waitParked(t, h, 0)
	}
}

// TestClusterClientGoneLeavesQueue: in cluster mode too, a client that
// closes its connection mid-wait has its wait withdrawn through the log
// (on every replica), and the next waiter gets the lock on release; and
// a grant that races the close is released.
func TestClusterClientGoneLeavesQueue(t *testing.T) {
	if !canWatch {
		t.Skip("no peerGone on this platform")
	}
	rc := startRESTCluster(t, nil, 90*time.Second)
	lm, lh := rc.leader()
	a, b, c := lh.session(), lh.session(), lh.session()
	r := lh.do(call{method: "POST", path: "/v1/locks/k", session: a})
	wantStatus(t, "a acquires", r, http.StatusOK, "ok")

	conn := parkRaw(t, lh.srv.Addr(), b, "/v1/locks/k", `{"acquire_timeout_s":20}`)
	waitParked(t, lh, 1)
	_ = conn.Close()
	waitParked(t, lh, 0)
	for _, m := range rc.c.Members() {
		waitCounts(t, m, 1, 0) // b's wait withdrawn everywhere
	}

	// The race: b parks again, closes, and the lock is released at once.
	conn = parkRaw(t, lh.srv.Addr(), b, "/v1/locks/k", `{"acquire_timeout_s":20}`)
	waitParked(t, lh, 1)
	ch := lh.async(call{method: "POST", path: "/v1/locks/k", session: c, body: `{"acquire_timeout_s":20}`})
	waitParked(t, lh, 2)
	_ = conn.Close()
	wantStatus(t, "a releases", lh.do(call{method: "DELETE", path: "/v1/locks/k", session: a, body: `{"token":"` + r.str("token") + `"}`}), http.StatusOK, "ok")
	wantStatus(t, "c's blocking acquire", recv(t, ch, "c's blocking acquire"), http.StatusOK, "ok")
	waitParked(t, lh, 0)
	waitCounts(t, lm, 1, 0)
}
