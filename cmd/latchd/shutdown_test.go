package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShutdownIdleFast: SIGTERM stops an idle latchd (TCP and REST on),
// each time within signal's deadline, with one stop line. The times are
// logged, not asserted: gnet's Engine.Stop polls every 500 ms, which the
// server avoids (Client.Stop), and a loaded machine blurs a bound that
// close.
func TestShutdownIdleFast(t *testing.T) {
	if testing.Short() {
		t.Skip("re-runs the binary as a latchd process")
	}
	var took []time.Duration
	for range 5 {
		c := startChild(t, 0, true)
		took = append(took, c.signal(syscall.SIGTERM, 5*time.Second))
		if n := strings.Count(c.log(), "latchd stopped"); n != 1 {
			t.Fatalf("%d stop lines, want 1:\n%s", n, c.log())
		}
	}
	slices.Sort(took)
	t.Logf("idle SIGTERM to exit: %v", took)
}

// TestShutdownUnderLoad kills latchd with clients holding and waiting,
// several times. Each time: every queued waiter (TCP and REST) gets an
// error answer (TCP error, REST 503 shutting_down) and never a grant,
// new acquires are refused the same way, holders can still release (a
// REST holder on a new connection), and the process ends within
// --shutdown-timeout plus a margin: at once when the holders are done,
// at the timeout when one keeps its lock. It logs one stop line.
func TestShutdownUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("re-runs the binary as a latchd process")
	}
	const timeout = time.Second
	for i := range 6 {
		stubborn := i%2 == 1 // a TCP holder that never releases
		t.Run(fmt.Sprintf("run%d_stubborn=%v", i, stubborn), func(t *testing.T) {
			shutdownOnce(t, timeout, stubborn)
		})
	}
}

func shutdownOnce(t *testing.T, timeout time.Duration, stubborn bool) {
	c := startChild(t, 0, true, "--shutdown-timeout", strconv.Itoa(int(timeout/time.Second)))
	holder := mustDial(t, c)
	tok := mustLock(t, holder, "a")
	var keeper *rawTCP
	if stubborn {
		keeper = mustDial(t, c)
		mustLock(t, keeper, "k")
	}
	const nWaiters = 4
	waiters := make([]*rawTCP, nWaiters)
	for i := range waiters {
		waiters[i] = mustDial(t, c)
		if err := waiters[i].send("l", "a", "30 10"); err != nil {
			t.Fatal(err)
		}
	}
	restHolder := mustSession(t, c)
	code, body, err := httpOnce(c.http, "POST", "/v1/locks/b", restHolder, `{"acquire_timeout_s":0,"lease_ttl_s":60}`, 2*time.Second)
	if err != nil || code != 200 {
		t.Fatalf("REST lock: %d %s %v", code, body, err)
	}
	restTok := jsonField(t, body, "token")
	restWaiter := mustSession(t, c)
	restAnswer := make(chan string, 1)
	go func() {
		code, body, err := httpOnce(c.http, "POST", "/v1/locks/b", restWaiter, `{"acquire_timeout_s":30}`, 10*time.Second)
		restAnswer <- fmt.Sprintf("%d %s %v", code, body, err)
	}()
	idle := mustDial(t, c) // holds nothing; asks for a lock after the signal
	// Every waiter is queued before the signal: stats shows 4 on "a".
	waitQueued(t, c, "a", nWaiters)
	waitQueued(t, c, "b", 1)

	start := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i, w := range waiters {
		if a, err := w.read(5 * time.Second); a != "error" {
			t.Fatalf("TCP waiter %d: %q %v; want error", i, a, err)
		}
	}
	if a := <-restAnswer; !strings.HasPrefix(a, "503 ") || !strings.Contains(a, `"shutting_down"`) {
		t.Fatalf("REST waiter: %s; want 503 shutting_down", a)
	}
	// Draining: new acquires refused, releases work.
	if a, err := idle.do("l", "c", "0 10", 2*time.Second); a != "error" {
		t.Fatalf("TCP acquire while draining: %q %v; want error", a, err)
	}
	if code, body, _ := httpOnce(c.http, "POST", "/v1/locks/c", restWaiter, `{"acquire_timeout_s":0}`, 2*time.Second); code != 503 || !strings.Contains(body, "shutting_down") {
		t.Fatalf("REST acquire while draining: %d %s; want 503 shutting_down", code, body)
	}
	if a, err := holder.do("r", "a", tok, 2*time.Second); a != "ok" {
		t.Fatalf("TCP release while draining: %q %v", a, err)
	}
	if code, body, _ := httpOnce(c.http, "DELETE", "/v1/locks/b?token="+restTok, restHolder, "", 2*time.Second); code != 200 {
		t.Fatalf("REST release while draining: %d %s", code, body)
	}
	select {
	case <-c.done:
	case <-time.After(timeout + 3*time.Second):
		t.Fatalf("still running %v after SIGTERM", time.Since(start))
	}
	took := time.Since(start)
	if stubborn && took < timeout {
		t.Fatalf("stopped after %v with a lock still held; want the %v timeout first", took, timeout)
	}
	line := c.waitLog("latchd stopped", time.Second)
	if n := strings.Count(c.log(), "latchd stopped"); n != 1 {
		t.Fatalf("%d stop lines, want 1", n)
	}
	for _, want := range []string{`"reason": "signal terminated"`, `"waiters_answered": 5`} {
		if !strings.Contains(line, want) {
			t.Fatalf("stop line %q lacks %s", line, want)
		}
	}
	if leases := regexp.MustCompile(`"leases_dropped": (\d+)`).FindStringSubmatch(line); leases == nil ||
		(stubborn && leases[1] != "1") || (!stubborn && leases[1] != "0") {
		t.Fatalf("stop line %q: leases_dropped wrong (stubborn %v)", line, stubborn)
	}
	t.Logf("stopped %v after SIGTERM: %s", took.Round(time.Millisecond), line)
	_ = keeper
}

func mustDial(t *testing.T, c *child) *rawTCP {
	t.Helper()
	r, err := dialTCP(c.tcp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func mustLock(t *testing.T, r *rawTCP, key string) string {
	t.Helper()
	a, err := r.do("l", key, "0 60", 2*time.Second)
	if err != nil || !strings.HasPrefix(a, "ok ") {
		t.Fatalf("lock %s: %q %v", key, a, err)
	}
	return strings.Fields(a)[1]
}

func mustSession(t *testing.T, c *child) string {
	t.Helper()
	code, body, err := httpOnce(c.http, "POST", "/v1/sessions", "", "{}", 2*time.Second)
	if err != nil || code != 201 {
		t.Fatalf("session: %d %s %v", code, body, err)
	}
	return jsonField(t, body, "session_id")
}

func jsonField(t *testing.T, body, field string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	s, _ := m[field].(string)
	return s
}

// waitQueued waits until stats shows n waiters on key.
func waitQueued(t *testing.T, c *child, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_, body, err := httpOnce(c.http, "GET", "/v1/stats", "", "", 2*time.Second)
		if err == nil {
			var st struct {
				Locks []struct {
					Key     string `json:"key"`
					Waiters int    `json:"waiters"`
				} `json:"locks"`
			}
			if json.Unmarshal([]byte(body), &st) == nil {
				for _, l := range st.Locks {
					if l.Key == key && l.Waiters == n {
						return
					}
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d waiters on %q never showed in stats", n, key)
}

func TestShutdownTimeoutFlag(t *testing.T) {
	o, err := parseOptions(nil, env(map[string]string{"LATCHD_SHUTDOWN_TIMEOUT": "9", "LATCHD_HTTP_MAX_CONNECTIONS": "7"}), io.Discard)
	if err != nil || o.shutdownTimeout != 9 || o.httpMaxConns != 7 {
		t.Fatalf("from env: %+v, %v", o, err)
	}
	if o, _ := parseOptions(nil, env(nil), io.Discard); o.shutdownTimeout != 5 {
		t.Fatalf("default shutdown timeout %d, want 5", o.shutdownTimeout)
	}
	var errb bytes.Buffer
	if code := run([]string{"--shutdown-timeout", "-1"}, env(nil), io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), "--shutdown-timeout") {
		t.Fatalf("negative timeout: exit %d, %q", code, errb.String())
	}
	// 0 caps are derived from the descriptor limit; explicit ones kept.
	o, _ = parseOptions([]string{"--http-port", "1", "--max-connections", "50"}, env(nil), io.Discard)
	o.applyFDLimit(128)
	if o.maxConns != 50 || o.httpMaxConns != 22 {
		t.Fatalf("caps under 128 fds: tcp %d, http %d; want 50 (given) and 22 (derived)", o.maxConns, o.httpMaxConns)
	}
}

// TestShutdownTimeoutZeroWaitsForHolders: --shutdown-timeout 0 means no
// limit, as dflockd's 0: the stop waits while a lock is held and ends as
// soon as it is released.
func TestShutdownTimeoutZeroWaitsForHolders(t *testing.T) {
	if testing.Short() {
		t.Skip("re-runs the binary as a latchd process")
	}
	c := startChild(t, 0, false, "--shutdown-timeout", "0")
	holder := mustDial(t, c)
	tok := mustLock(t, holder, "a")
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	c.waitLog("shutting down", 5*time.Second)
	select {
	case <-c.done:
		t.Fatal("stopped with a lock held and --shutdown-timeout 0")
	case <-time.After(1500 * time.Millisecond): // past what a 0 s deadline would take
	}
	if a, err := holder.do("r", "a", tok, 2*time.Second); a != "ok" {
		t.Fatalf("release while draining: %q %v", a, err)
	}
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("still running 5 s after the last lock was released")
	}
}
