package main

import (
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// prlimitNoFile sets another process's RLIMIT_NOFILE, as prlimit(1) does.
func prlimitNoFile(pid int, n uint64) error {
	lim := unix.Rlimit{Cur: n, Max: n}
	return unix.Prlimit(pid, unix.RLIMIT_NOFILE, &lim, nil)
}

// flood opens n connections to addr (the kernel completes them into the
// listen backlog whether or not the server can accept) and returns them.
func flood(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break // backlog full: enough
		}
		cs = append(cs, c)
	}
	return cs
}

// acceptErrors sums latchd_accept_errors_total{listener=name} in a scrape.
func acceptErrors(scrape, name string) float64 {
	re := regexp.MustCompile(`(?m)^latchd_accept_errors_total\{listener="` + name + `",reason="[a-z]+"\} ([0-9.e+]+)$`)
	total := 0.0
	for _, m := range re.FindAllStringSubmatch(scrape, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		total += v
	}
	return total
}

// TestAcceptSurvivesFDExhaustion reproduces descriptor exhaustion: a running
// latchd's descriptor limit is lowered to 128 and 200 connections are
// opened to each listener. Connected clients must keep being served,
// /healthz must say 503 while a listener is out of descriptors and 200
// after, the errors must be counted, and both listeners must accept again
// once the flood closes. (gnet v2.10.0's own accept loop shut the engine
// down on the first EMFILE, dropping every client; fasthttp's Serve
// returned.)
func TestAcceptSurvivesFDExhaustion(t *testing.T) {
	if testing.Short() {
		t.Skip("re-runs the binary as a latchd process")
	}
	c := startChild(t, 0, true, "--log-level", "warn")
	bystander, err := dialTCP(c.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close()
	a, err := bystander.do("l", "held", "0 60", 2*time.Second)
	if err != nil || !strings.HasPrefix(a, "ok ") {
		t.Fatalf("bystander lock: %q %v", a, err)
	}
	token := strings.Fields(a)[1]
	health, err := dialHTTP(c.http) // a keep-alive connection opened before the flood
	if err != nil {
		t.Fatal(err)
	}
	defer health.Close()
	if code, body, err := health.do("GET", "/healthz", "", "", 2*time.Second); code != 200 {
		t.Fatalf("healthz before: %d %s %v", code, body, err)
	}

	if err := prlimitNoFile(c.cmd.Process.Pid, 128); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	var flooded []net.Conn
	defer func() {
		for _, f := range flooded {
			_ = f.Close()
		}
	}()
	flooded = append(flooded, flood(t, c.tcp, 200)...)
	flooded = append(flooded, flood(t, c.http, 200)...)

	// While out of descriptors: /healthz 503 naming the listeners.
	deadline := time.Now().Add(10 * time.Second)
	var code int
	var body string
	for time.Now().Before(deadline) {
		code, body, err = health.do("GET", "/healthz", "", "", 2*time.Second)
		if err != nil {
			t.Fatalf("healthz on the kept connection during the flood: %v", err)
		}
		if code == 503 && strings.Contains(body, `"tcp"`) && strings.Contains(body, `"http"`) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code != 503 || !strings.Contains(body, "listener_down") {
		t.Fatalf("healthz during the flood: %d %s; want 503 listener_down naming tcp and http", code, body)
	}
	// The connected client is still served, and keeps its lock.
	if a, err := bystander.do("n", "held", token, 2*time.Second); err != nil || !strings.HasPrefix(a, "ok ") {
		t.Fatalf("bystander renew during the flood: %q %v", a, err)
	}

	for _, f := range flooded {
		_ = f.Close()
	}
	flooded = nil
	start := time.Now()
	// Accepting again: a new TCP client gets a lock, a new REST client an
	// answer, /healthz 200. Once one TCP client is served no other dials
	// the TCP port, as no client reaches a node its balancer reads 503
	// from: /healthz must see the listener back without one.
	deadline = time.Now().Add(10 * time.Second)
	var tcpOK, httpOK bool
	var lastCode int
	var lastErr error
	for time.Now().Before(deadline) && !(tcpOK && httpOK) {
		if !tcpOK {
			if nc, err := dialTCP(c.tcp); err == nil {
				a, err := nc.do("l", "fresh", "0 5", time.Second)
				tcpOK = err == nil && strings.HasPrefix(a, "ok ")
				_ = nc.Close()
			}
		}
		if !httpOK {
			code, _, err := httpOnce(c.http, "GET", "/healthz", "", "", time.Second)
			httpOK = err == nil && code == 200
			lastCode, lastErr = code, err
		}
		if !(tcpOK && httpOK) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !tcpOK || !httpOK {
		code, body, err := health.do("GET", "/healthz", "", "", 2*time.Second)
		t.Fatalf("after the flood closed: new TCP served %v, new REST healthz 200 %v (last: %d %v; on the kept connection: %d %s %v)",
			tcpOK, httpOK, lastCode, lastErr, code, body, err)
	}
	t.Logf("accepting again %v after the flood closed", time.Since(start).Round(time.Millisecond))
	if code, body, err := health.do("GET", "/healthz", "", "", 2*time.Second); code != 200 {
		t.Fatalf("healthz after: %d %s %v", code, body, err)
	}
	code, scrape, err := httpOnce(c.http, "GET", "/metrics", "", "", 5*time.Second)
	if err != nil || code != 200 {
		t.Fatalf("metrics: %d %v", code, err)
	}
	if acceptErrors(scrape, "tcp") == 0 || acceptErrors(scrape, "http") == 0 {
		t.Fatalf("latchd_accept_errors_total not counted for tcp and http:\n%s", grepLines(scrape, "latchd_accept_errors_total"))
	}
	if a, err := bystander.do("n", "held", token, 2*time.Second); err != nil || !strings.HasPrefix(a, "ok ") {
		t.Fatalf("bystander renew after: %q %v", a, err)
	}
	if !strings.Contains(c.log(), "accept failed") {
		t.Errorf("no accept error logged")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestMaxConnectionsUnderFDLimit: under a descriptor limit of 128,
// --max-connections 50 (and the REST cap derived from the limit) refuse
// extra clients cleanly (TCP: error, then close; REST: 503) before the
// process runs out: no accept ever fails, /healthz stays 200, and the
// admitted clients are served throughout.
func TestMaxConnectionsUnderFDLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("re-runs the binary as a latchd process")
	}
	c := startChild(t, 128, true, "--max-connections", "50", "--log-level", "warn")
	var conns []*rawTCP
	defer func() {
		for _, r := range conns {
			_ = r.Close()
		}
	}()
	admitted, refused := 0, 0
	for i := range 200 {
		r, err := dialTCP(c.tcp)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, r)
		a, err := r.do("l", "k"+strconv.Itoa(i), "0 60", 5*time.Second)
		switch {
		case err == nil && strings.HasPrefix(a, "ok "):
			admitted++
		case a == "error":
			refused++
			if _, err := r.read(5 * time.Second); err == nil {
				t.Fatalf("refused connection %d not closed after error", i)
			}
		default:
			t.Fatalf("connection %d: %q %v; want ok or a clean error", i, a, err)
		}
	}
	if admitted != 50 || refused != 150 {
		t.Fatalf("admitted %d, refused %d; want 50 and 150", admitted, refused)
	}
	var rest []net.Conn
	defer func() {
		for _, r := range rest {
			_ = r.Close()
		}
	}()
	rest = flood(t, c.http, 60) // idle REST connections hold their slots
	deadline := time.Now().Add(5 * time.Second)
	code := 0
	for time.Now().Before(deadline) && code != 503 {
		code, _, _ = httpOnce(c.http, "GET", "/healthz", "", "", 2*time.Second)
	}
	if code != 503 {
		t.Fatalf("REST over its cap: %d, want 503 from the concurrency limit", code)
	}
	for _, r := range rest {
		_ = r.Close()
	}
	rest = nil
	// Every admitted client is still served.
	for i, r := range conns[:50] {
		if a, err := r.do("stats", "_", "_", 5*time.Second); err != nil || !strings.HasPrefix(a, "ok ") {
			t.Fatalf("admitted connection %d: %q %v", i, a, err)
		}
	}
	deadline = time.Now().Add(5 * time.Second)
	var scrape string
	for time.Now().Before(deadline) {
		var err error
		if code, scrape, err = httpOnce(c.http, "GET", "/metrics", "", "", 2*time.Second); err == nil && code == 200 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	if n := acceptErrors(scrape, "tcp") + acceptErrors(scrape, "http"); n != 0 {
		t.Fatalf("accept errors under the caps: %v\n%s", n, grepLines(scrape, "latchd_accept_errors_total"))
	}
	if code, body, _ := httpOnce(c.http, "GET", "/healthz", "", "", 2*time.Second); code != 200 {
		t.Fatalf("healthz: %d %s", code, body)
	}
}
