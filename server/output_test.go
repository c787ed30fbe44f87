package server_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	latchdclient "github.com/latchd/latchd/client"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// makeKeys creates n idle keys with names of keyLen bytes on c, acquiring
// and releasing them in pipelined batches (of at most 200: the connection
// may hold no more than its share of the keys at once), and closes c.
func makeKeys(t testing.TB, c *client, n, keyLen int) {
	t.Helper()
	const batch = 200
	for lo := 0; lo < n; lo += batch {
		hi := min(n, lo+batch)
		var b strings.Builder
		for i := lo; i < hi; i++ {
			fmt.Fprintf(&b, "l\n%0*d\n0\n", keyLen, i)
		}
		c.send(b.String())
		toks := make([]string, hi-lo)
		for i := range toks {
			toks[i] = grant(t, c.line(), "ok")
		}
		b.Reset()
		for i := lo; i < hi; i++ {
			fmt.Fprintf(&b, "r\n%0*d\n%s\n", keyLen, i, toks[i-lo])
		}
		c.send(b.String())
		for range hi - lo {
			if got := c.line(); got != "ok" {
				t.Fatalf("release: %q", got)
			}
		}
	}
	_ = c.c.Close()
}

// dialNonReader connects with a small receive buffer, so that what the
// client does not read piles up in the server rather than in the kernel.
func dialNonReader(t testing.TB, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// startMetered starts a server with metrics and the given config changes,
// and returns it with its registry.
func startMetered(t *testing.T, opt servertest.Option) (*servertest.Server, *metrics.Registry) {
	t.Helper()
	reg := metrics.NewRegistry(nil)
	s := servertest.StartServerWith(t, []server.Option{server.WithMetrics(reg.TCP())}, opt,
		func(_ *engine.Config, c *server.Config) { c.SendBuffer = 16 << 10 })
	return s, reg
}

// closedFor polls the registry until a connection was closed for reason.
func closedFor(t *testing.T, reg *metrics.Registry, reason string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() bool {
		return counter(t, reg, "latchd_tcp_protocol_errors_total", "reason", reason) > 0
	}, "no connection closed for "+reason)
}

func TestStatsTruncated(t *testing.T) {
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) { c.MaxStatsBytes = 8 << 10 })
	makeKeys(t, dial(t, s.Addr), 100, 200) // about 25 KiB of idle keys
	a := dial(t, s.Addr)
	grant(t, a.do("l", "held", "0"), "ok")
	grant(t, a.do("sl", "sem", "0 3"), "ok")
	line := a.do("stats", "_", "_")
	body, ok := strings.CutPrefix(line, "ok ")
	if !ok || len(body) > 8<<10 {
		t.Fatalf("stats answer of %d bytes, want ok and at most 8 KiB of JSON", len(line))
	}
	var st struct {
		Connections int               `json:"connections"`
		IdleLocks   []json.RawMessage `json:"idle_locks"`
		Truncated   bool              `json:"truncated"`
		Totals      map[string]int    `json:"totals"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("stats JSON: %v: %.200s", err, body)
	}
	want := map[string]int{"locks": 1, "semaphores": 1, "idle_locks": 100, "idle_semaphores": 0}
	if !st.Truncated || !maps(st.Totals, want) || len(st.IdleLocks) == 0 || len(st.IdleLocks) >= 100 {
		t.Fatalf("stats: truncated %v, totals %v, %d idle locks listed; want truncated, totals %v, some idle locks",
			st.Truncated, st.Totals, len(st.IdleLocks), want)
	}
	// The Go client still decodes it.
	cl, err := latchdclient.Dial(context.Background(), s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cs, err := cl.Stats(context.Background())
	if err != nil || len(cs.IdleLocks) == 0 {
		t.Fatalf("client.Stats: %v, %+v", err, cs)
	}
	// A small state answers in full, without the new fields.
	if err := a.c.Close(); err != nil {
		t.Fatal(err)
	}
	small := servertest.StartServer(t)
	if got := dial(t, small.Addr).do("stats", "_", "_"); strings.Contains(got, "truncated") {
		t.Fatalf("small stats: %s", got)
	}
}

func maps(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestOutboundCapCountsStats: a client that pipelines stats requests and
// reads none is closed once its unsent answers pass MaxConnOutput, well
// before the old fixed 4 MiB.
func TestOutboundCapCountsStats(t *testing.T) {
	s, reg := startMetered(t, func(_ *engine.Config, c *server.Config) {
		c.MaxConnOutput = 256 << 10
		c.MaxStatsBytes = 64 << 10
	})
	makeKeys(t, dial(t, s.Addr), 250, 250) // a stats answer of about 64 KiB
	c := dialNonReader(t, s.Addr)
	if _, err := c.Write([]byte(strings.Repeat("stats\n_\n\n", 40))); err != nil { // 2.5 MiB of answers
		t.Fatal(err)
	}
	closedFor(t, reg, "outbound_overflow")
	testutil.Eventually(t, 5*time.Second, func() bool { return s.TCP.Connections() == 0 }, "non-reader still open")
}

func TestWriteTimeoutClosesNonReader(t *testing.T) {
	s, reg := startMetered(t, func(_ *engine.Config, c *server.Config) {
		c.WriteTimeout = 500 * time.Millisecond
		c.MaxStatsBytes = 64 << 10
	})
	makeKeys(t, dial(t, s.Addr), 250, 250)
	// A reader that is merely slow is not closed: 3 answers of 64 KiB
	// read through a 4 KiB window, pausing 20 ms after each read, take
	// longer than the write timeout.
	slow := dialNonReader(t, s.Addr)
	if _, err := slow.Write([]byte(strings.Repeat("stats\n_\n\n", 3))); err != nil {
		t.Fatal(err)
	}
	slowDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 16<<10)
		lines := 0
		for lines < 3 {
			_ = slow.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := slow.Read(buf)
			if err != nil {
				slowDone <- fmt.Errorf("after %d answers: %w", lines, err)
				return
			}
			lines += strings.Count(string(buf[:n]), "\n")
			time.Sleep(20 * time.Millisecond)
		}
		slowDone <- nil
	}()
	c := dialNonReader(t, s.Addr)
	if _, err := c.Write([]byte(strings.Repeat("stats\n_\n\n", 12))); err != nil { // 750 KiB of answers
		t.Fatal(err)
	}
	start := time.Now()
	closedFor(t, reg, "write_timeout")
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("closed after %v, before the write timeout", d)
	}
	if err := <-slowDone; err != nil {
		t.Fatalf("slow reader: %v", err)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Logf("the slow reader took only %v, less than the write timeout", d)
	}
	if n := counter(t, reg, "latchd_tcp_protocol_errors_total", "reason", "write_timeout"); n != 1 {
		t.Fatalf("%v connections closed for the write timeout, want 1 (the non-reader)", n)
	}
}

// heapInuse returns the heap in use after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestAmplificationBounded is the attack in small: connections
// that each pipeline stats requests and never read. The heap must stay
// within a bound (before the fix each connection could hold 4 MiB and
// every stats answer was built at once), a bystander must go on making
// lock round trips (a count over the attack's 3 s or more), the budget
// must close attackers, and the memory must come back once they close.
//
// The attack must take the budget over whatever the scheduling. Served
// one after the other (a loaded machine), attackers asking for many stats
// answers were each closed by the per-connection cap before the budget
// filled; and once the budget has no room for a full stats answer (they
// carry the totals only then), the small answers left went to the
// kernel's socket buffers, leaving the budget a few KiB short for good.
// So each attacker asks for no more stats answers than stay under the
// cap, and once stats answers can no longer take the budget over,
// non-readers pipelining releases (answers beyond what the kernel holds)
// add the last bytes.
func TestAmplificationBounded(t *testing.T) {
	const (
		attackers = 60
		perConn   = 3 // 3 stats answers of 256 KiB stay under the 1 MiB cap
		budget    = 4 << 20
		statsMax  = 256 << 10
		heapBound = 64 << 20
	)
	s, reg := startMetered(t, func(_ *engine.Config, c *server.Config) {
		c.MaxOutput = budget
		c.MaxConnOutput = 1 << 20
		c.MaxStatsBytes = statsMax
		c.WriteTimeout = 0 // the budget alone must hold
		// A small kernel buffer, so answers pile up where the budget sees
		// them rather than in the socket.
		c.SendBuffer = 8 << 10
	})
	makeKeys(t, dial(t, s.Addr), 1000, 250) // a stats answer of about 270 KiB, capped at 256
	base := heapInuse()
	stop := make(chan struct{})
	lats := bystander(dial(t, s.Addr), stop)
	var peak uint64
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	conns := make([]net.Conn, attackers)
	req := []byte(strings.Repeat("stats\n_\n\n", perConn))
	for i := range conns {
		conns[i] = dialNonReader(t, s.Addr)
		if _, err := conns[i].Write(req); err != nil {
			t.Fatal(err)
		}
		sample()
	}
	// Attack for 3 s, and on until the budget has closed someone: how
	// fast the answers are built depends on the machine's load.
	start, floods := time.Now(), 0
	budgetClosed := func() bool {
		return counter(t, reg, "latchd_tcp_protocol_errors_total", "reason", "output_budget") > 0
	}
	for time.Since(start) < 3*time.Second || (time.Since(start) < 30*time.Second && !budgetClosed()) {
		sample()
		// At most 64 floods: enough to take the budget over alone.
		if s.TCP.OutputBudget().Used() > budget-statsMax && floods < 64 && !budgetClosed() {
			conns = append(conns, flood(t, s.Addr))
			floods++
		}
		time.Sleep(20 * time.Millisecond)
	}
	attack := time.Since(start)
	close(stop)
	l := <-lats
	for _, c := range conns {
		_ = c.Close()
	}
	// 5 ms apart: a served bystander makes hundreds, one held up for a
	// second at a time a handful.
	n := len(l)
	if n < 30 {
		t.Fatalf("bystander made %d round trips in %v of attack", n, attack.Round(time.Millisecond))
	}
	t.Logf("attack %v, %d floods: heap in use: base %d MiB, peak %d MiB; bystander %d round trips, p99 %v; budget used %d; closed for the budget %v, for the cap %v",
		attack.Round(time.Millisecond), floods, base>>20, peak>>20, n, l[min(n-1, n*99/100)], s.TCP.OutputBudget().Used(),
		counter(t, reg, "latchd_tcp_protocol_errors_total", "reason", "output_budget"),
		counter(t, reg, "latchd_tcp_protocol_errors_total", "reason", "outbound_overflow"))
	if peak > base+heapBound {
		t.Errorf("heap peaked at %d MiB over a %d MiB base, want at most %d MiB more", peak>>20, base>>20, heapBound>>20)
	}
	closedFor(t, reg, "output_budget")
	testutil.Eventually(t, 10*time.Second, func() bool { return s.TCP.Connections() == 1 }, "attackers still open")
	testutil.Eventually(t, 10*time.Second, func() bool { return s.TCP.OutputBudget().Used() == 0 },
		"output budget not given back")
	testutil.Eventually(t, 10*time.Second, func() bool { return heapInuse() < 2*base+(8<<20) }, "heap not back near its base")
}

// flood connects a non-reader that pipelines releases of a key nobody
// holds: small answers ("error"), about 96 KiB of them, that no check
// holds back and that it never reads. The kernel's socket buffers take a
// few tens of KiB of them (with the small buffers the tests set); the
// server keeps the rest.
func flood(t *testing.T, addr string) net.Conn {
	t.Helper()
	c := dialNonReader(t, addr)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(strings.Repeat("r\nnobody\n1\n", 16<<10))); err != nil {
		t.Fatalf("flood: %v", err)
	}
	return c
}

// bystander makes lock round trips on c, 5 ms apart, until stop is
// closed, then sends their latencies, sorted.
func bystander(c *client, stop <-chan struct{}) <-chan []time.Duration {
	done := make(chan []time.Duration, 1)
	go func() {
		var lats []time.Duration
		defer func() {
			slices.Sort(lats)
			done <- lats
		}()
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			c.req("l", "bystander", "5")
			f := strings.Fields(c.line())
			if len(f) != 3 || c.do("r", "bystander", f[1]) != "ok" {
				return
			}
			lats = append(lats, time.Since(t0))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return done
}

func TestWriteTimeoutClosesTLSNonReader(t *testing.T) {
	cert, pool := selfSigned(t)
	s, reg := startMetered(t, func(_ *engine.Config, c *server.Config) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		c.WriteTimeout = 300 * time.Millisecond
		c.MaxStatsBytes = 64 << 10
	})
	makeKeys(t, dialTLS(t, s.Addr, pool), 250, 250)
	raw := dialNonReader(t, s.Addr)
	c := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if _, err := c.Write([]byte(strings.Repeat("stats\n_\n\n", 12))); err != nil { // 750 KiB of answers
		t.Fatal(err)
	}
	closedFor(t, reg, "write_timeout")
	testutil.Eventually(t, 5*time.Second, func() bool { return s.TCP.Connections() == 0 }, "TLS non-reader still open")
	testutil.Eventually(t, 5*time.Second, func() bool { return s.TCP.OutputBudget().Used() == 0 }, "TLS write not given back")
}
