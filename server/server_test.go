package server_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// client is a raw protocol connection for tests.
type client struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes raw bytes.
func (c *client) send(s string) {
	c.t.Helper()
	if _, err := c.c.Write([]byte(s)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// req writes one request.
func (c *client) req(cmd, key, arg string) { c.send(cmd + "\n" + key + "\n" + arg + "\n") }

// line reads one response line, failing after 5 s.
func (c *client) line() string {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	s, err := c.br.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read: %v (got %q)", err, s)
	}
	return strings.TrimSuffix(s, "\n")
}

// do sends one request and reads its answer.
func (c *client) do(cmd, key, arg string) string {
	c.t.Helper()
	c.req(cmd, key, arg)
	return c.line()
}

// silent asserts that nothing arrives within d.
func (c *client) silent(d time.Duration) {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	if s, err := c.br.ReadString('\n'); err == nil || s != "" {
		c.t.Fatalf("unexpected answer %q (err %v)", s, err)
	}
	_ = c.c.SetReadDeadline(time.Time{})
}

// closed asserts the server closes the connection.
func (c *client) closed() {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	s, err := c.br.ReadString('\n')
	if err == nil {
		c.t.Fatalf("connection still open, read %q", s)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.t.Fatalf("connection not closed within 5s")
	}
}

// grant parses "ok <token> <ttl>" (or "acquired ...") and returns the token.
func grant(t testing.TB, line, word string) string {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != word {
		t.Fatalf("got %q, want %q <token> <ttl>", line, word)
	}
	if _, err := fence.ParseString(f[1]); err != nil {
		t.Fatalf("bad token in %q: %v", line, err)
	}
	return f[1]
}

func TestLockReleaseRenew(t *testing.T) {
	s := servertest.StartServer(t)
	c := dial(t, s.Addr)
	line := c.do("l", "k1", "10")
	tok := grant(t, line, "ok")
	if !strings.HasSuffix(line, " 33") {
		t.Errorf("default TTL: got %q, want ttl 33", line)
	}
	if got := c.do("n", "k1", tok); got != "ok 33" {
		t.Errorf("renew: got %q, want ok 33", got)
	}
	if got := c.do("n", "k1", tok+" 60"); got != "ok 60" {
		t.Errorf("renew 60: got %q, want ok 60", got)
	}
	if got := c.do("r", "k1", "00000000000000000000000000000000"); got != "error" {
		t.Errorf("release wrong token: got %q, want error", got)
	}
	if got := c.do("r", "k1", tok); got != "ok" {
		t.Errorf("release: got %q, want ok", got)
	}
	if got := c.do("r", "k1", tok); got != "error" {
		t.Errorf("second release: got %q, want error", got)
	}
	if got := c.do("n", "k1", tok); got != "error" {
		t.Errorf("renew released: got %q, want error", got)
	}
	if got := c.do("r", "nope", tok); got != "error" {
		t.Errorf("release unknown key: got %q, want error", got)
	}
	tok2 := grant(t, c.do("l", "k1", "0 5"), "ok")
	if tok2 <= tok {
		t.Errorf("token did not increase: %s then %s", tok, tok2)
	}
}

func TestTryLockTimeout(t *testing.T) {
	s := servertest.StartServer(t)
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	grant(t, a.do("l", "k", "0"), "ok")
	if got := b.do("l", "k", "0"); got != "timeout" {
		t.Fatalf("try-lock on busy key: got %q, want timeout", got)
	}
	start := time.Now()
	// do fails unless the answer comes within its read deadline (5 s).
	if got := b.do("l", "k", "1"); got != "timeout" {
		t.Fatalf("1s lock on busy key: got %q, want timeout", got)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("timeout came after %v, before the 1 s wait ended", d)
	}
}

func TestFIFOHandOffOverTCP(t *testing.T) {
	s := servertest.StartServer(t)
	holder := dial(t, s.Addr)
	tok := grant(t, holder.do("l", "k", "10"), "ok")
	const n = 5
	waiters := make([]*client, n)
	for i := range waiters {
		waiters[i] = dial(t, s.Addr)
		waiters[i].req("l", "k", "10")
		// Each waiter must be queued before the next one joins.
		testutil.Eventually(t, 5*time.Second, func() bool {
			for _, l := range s.Engine.Snapshot(0).Locks {
				if l.Key == "k" && l.Waiters == i+1 {
					return true
				}
			}
			return false
		}, "waiter queued")
	}
	if got := holder.do("r", "k", tok); got != "ok" {
		t.Fatalf("release: %q", got)
	}
	for i, w := range waiters {
		next := grant(t, w.line(), "ok")
		if next <= tok {
			t.Fatalf("waiter %d token %s not above %s", i, next, tok)
		}
		for _, other := range waiters[i+1:] {
			other.silent(20 * time.Millisecond)
		}
		if got := w.do("r", "k", next); got != "ok" {
			t.Fatalf("waiter %d release: %q", i, got)
		}
		tok = next
	}
}

func TestSemaphore(t *testing.T) {
	s := servertest.StartServer(t)
	cs := make([]*client, 4)
	toks := make([]string, 3)
	for i := range cs {
		cs[i] = dial(t, s.Addr)
	}
	for i := 0; i < 3; i++ {
		toks[i] = grant(t, cs[i].do("sl", "sem", "0 3"), "ok")
	}
	if got := cs[3].do("sl", "sem", "0 3"); got != "timeout" {
		t.Fatalf("4th slot: got %q, want timeout", got)
	}
	if got := cs[3].do("l", "sem", "0"); got != "error_limit_mismatch" {
		t.Fatalf("lock on semaphore key: got %q, want error_limit_mismatch", got)
	}
	if got := cs[3].do("sl", "sem", "0 4"); got != "error_limit_mismatch" {
		t.Fatalf("other limit: got %q, want error_limit_mismatch", got)
	}
	cs[3].req("sl", "sem", "10 3 7")
	cs[3].silent(30 * time.Millisecond)
	if got := cs[1].do("sr", "sem", toks[1]); got != "ok" {
		t.Fatalf("sr: %q", got)
	}
	line := cs[3].line()
	tok := grant(t, line, "ok")
	if !strings.HasSuffix(line, " 7") {
		t.Errorf("ttl: got %q, want 7", line)
	}
	if got := cs[3].do("sn", "sem", tok+" 9"); got != "ok 9" {
		t.Errorf("sn: got %q", got)
	}
}

func TestTwoPhase(t *testing.T) {
	s := servertest.StartServer(t)
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	tokA := grant(t, a.do("e", "k", ""), "acquired")
	if got := a.do("e", "k", ""); got != "error_already_enqueued" {
		t.Fatalf("second enqueue by holder: got %q, want error_already_enqueued", got)
	}
	if got := b.do("w", "k", "0"); got != "error_not_enqueued" {
		t.Fatalf("wait without enqueue: got %q, want error_not_enqueued", got)
	}
	if got := b.do("e", "k", "20"); got != "queued" {
		t.Fatalf("enqueue on busy key: got %q, want queued", got)
	}
	if got := b.do("w", "k", "0"); got != "timeout" {
		t.Fatalf("w 0 while queued: got %q, want timeout", got)
	}
	if got := b.do("w", "k", "1"); got != "error_not_enqueued" {
		t.Fatalf("w after timed-out wait: got %q, want error_not_enqueued", got)
	}
	if got := b.do("e", "k", "20"); got != "queued" {
		t.Fatalf("re-enqueue: got %q", got)
	}
	b.req("w", "k", "10")
	b.silent(30 * time.Millisecond)
	if got := a.do("r", "k", tokA); got != "ok" {
		t.Fatalf("release: %q", got)
	}
	line := b.line()
	grant(t, line, "ok")
	if !strings.HasSuffix(line, " 20") {
		t.Errorf("w grant ttl: got %q, want 20", line)
	}
	// Granted between e and w: w answers at once.
	c := dial(t, s.Addr)
	tokB := grant(t, line, "ok")
	if got := c.do("se", "s2", "2"); !strings.HasPrefix(got, "acquired ") {
		t.Fatalf("se: %q", got)
	}
	if got := a.do("e", "k", "5"); got != "queued" {
		t.Fatalf("e: %q", got)
	}
	if got := b.do("r", "k", tokB); got != "ok" {
		t.Fatalf("release: %q", got)
	}
	grant(t, a.do("w", "k", "0"), "ok")
}

func TestPipelinedAndBlockedOrdering(t *testing.T) {
	s := servertest.StartServer(t)
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	// Many requests in one write are answered in order.
	a.send("l\np1\n0\nl\np2\n0\nl\np3\n0\nstats\n_\n_\n")
	for i := 0; i < 3; i++ {
		grant(t, a.line(), "ok")
	}
	if got := a.line(); !strings.HasPrefix(got, "ok {") {
		t.Fatalf("stats: %q", got)
	}
	tok := grant(t, a.do("l", "k", "0"), "ok")
	// b's lock waits; the try-lock behind it must not run before it.
	b.send("l\nk\n10\nl\nother\n0\n")
	b.silent(50 * time.Millisecond)
	if got := a.do("l", "other", "0"); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("a takes other while b's request is held: %q", got)
	}
	if got := a.do("r", "k", tok); got != "ok" {
		t.Fatalf("release: %q", got)
	}
	grant(t, b.line(), "ok")
	if got := b.line(); got != "timeout" {
		t.Fatalf("held request ran after the grant: got %q, want timeout (a holds other)", got)
	}
}

func TestDisconnectHandOff(t *testing.T) {
	s := servertest.StartServer(t)
	a, b, c := dial(t, s.Addr), dial(t, s.Addr), dial(t, s.Addr)
	grant(t, a.do("l", "k", "0"), "ok")
	grant(t, c.do("l", "mine", "0"), "ok")
	b.req("l", "k", "10")
	b.silent(30 * time.Millisecond)
	_ = a.c.Close()
	grant(t, b.line(), "ok")
	// c's lock was not touched by a's disconnect.
	if got := a2(t, s.Addr).do("l", "mine", "0"); got != "timeout" {
		t.Fatalf("other client's lock was released: %q", got)
	}
}

func a2(t *testing.T, addr string) *client { return dial(t, addr) }

func TestDisconnectWithdrawsWait(t *testing.T) {
	s := servertest.StartServer(t)
	a, b, c := dial(t, s.Addr), dial(t, s.Addr), dial(t, s.Addr)
	tok := grant(t, a.do("l", "k", "0"), "ok")
	b.req("l", "k", "10")
	c.req("l", "k", "10")
	testutil.Eventually(t, 5*time.Second, func() bool {
		l := s.Engine.Snapshot(0).Locks
		return len(l) == 1 && l[0].Waiters == 2
	}, "two waiters")
	_ = b.c.Close()
	testutil.Eventually(t, 5*time.Second, func() bool {
		l := s.Engine.Snapshot(0).Locks
		return len(l) == 1 && l[0].Waiters == 1
	}, "b's wait withdrawn")
	if got := a.do("r", "k", tok); got != "ok" {
		t.Fatal(got)
	}
	grant(t, c.line(), "ok")
}

func TestLeaseExpiryHandOff(t *testing.T) {
	s := servertest.StartServer(t)
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	tok := grant(t, a.do("l", "k", "0 1"), "ok")
	// line's read deadline (5 s) separates a hand-off at the lease's end
	// (1 s) from the wait's own end (60 s).
	b.req("l", "k", "60")
	grant(t, b.line(), "ok")
	if got := a.do("n", "k", tok); got != "error" {
		t.Errorf("renew after expiry: got %q, want error", got)
	}
	if got := a.do("r", "k", tok); got != "error" {
		t.Errorf("release after expiry: got %q, want error", got)
	}
}

func TestProtocolViolations(t *testing.T) {
	s := servertest.StartServer(t)
	bystander := dial(t, s.Addr)
	tok := grant(t, bystander.do("l", "held", "0"), "ok")
	waiter := dial(t, s.Addr)
	waiter.req("l", "held", "30")
	testutil.Eventually(t, 5*time.Second, func() bool {
		l := s.Engine.Snapshot(0).Locks
		return len(l) == 1 && l[0].Waiters == 1
	}, "waiter queued")
	cases := []struct{ name, in string }{
		{"unknown command", "x\nk\n1\n"},
		{"bad integer", "l\nk\nabc\n"},
		{"empty key", "l\n\n1\n"},
		{"key with space", "l\na b\n1\n"},
		{"key with tab", "l\na\tb\n1\n"},
		{"negative timeout", "l\nk\n-1\n"},
		{"empty token", "r\nk\n\n"},
		{"wrong argument count", "l\nk\n1 2 3\n"},
		{"ttl zero", "l\nk\n1 0\n"},
		{"limit zero", "sl\nk\n1 0\n"},
		{"negative ttl", "n\nk\n" + tok + " -5\n"},
		{"line too long", "l\n" + strings.Repeat("k", 300) + "\n1\n"},
		{"line too long without newline", strings.Repeat("x", 400)},
		{"auth when none configured then junk", "auth\n_\nsecret\nbogus\nk\n1\n"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, s.Addr)
			c.send(tt.in)
			got := c.line()
			if tt.name == "auth when none configured then junk" {
				if got != "error" {
					t.Fatalf("auth without token: got %q, want error", got)
				}
				got = c.line()
			}
			if got != "error" {
				t.Fatalf("got %q, want error", got)
			}
			c.closed()
		})
	}
	// Nobody else's lock or queue was disturbed.
	if got := bystander.do("n", "held", tok); got != "ok 33" {
		t.Fatalf("bystander's lock: %q", got)
	}
	l := s.Engine.Snapshot(0).Locks
	if len(l) != 1 || l[0].Waiters != 1 {
		t.Fatalf("queue disturbed: %+v", l)
	}
	if got := bystander.do("r", "held", tok); got != "ok" {
		t.Fatal(got)
	}
	grant(t, waiter.line(), "ok")
}

func TestCRLFAndSplitWrites(t *testing.T) {
	s := servertest.StartServer(t)
	c := dial(t, s.Addr)
	msg := "l\r\nk\r\n0\r\n"
	for i := 0; i < len(msg); i++ {
		c.send(msg[i : i+1])
	}
	grant(t, c.line(), "ok")
}

func TestAuth(t *testing.T) {
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) { c.AuthToken = "s3cret" })
	t.Run("no auth", func(t *testing.T) {
		c := dial(t, s.Addr)
		if got := c.do("l", "k", "0"); got != "error_auth" {
			t.Fatalf("got %q, want error_auth", got)
		}
		c.closed()
	})
	t.Run("wrong secret", func(t *testing.T) {
		c := dial(t, s.Addr)
		if got := c.do("auth", "_", "nope"); got != "error_auth" {
			t.Fatalf("got %q, want error_auth", got)
		}
		c.closed()
	})
	t.Run("right secret", func(t *testing.T) {
		c := dial(t, s.Addr)
		if got := c.do("auth", "_", "s3cret"); got != "ok" {
			t.Fatalf("got %q, want ok", got)
		}
		grant(t, c.do("l", "k", "0"), "ok")
	})
}

func TestStats(t *testing.T) {
	s := servertest.StartServer(t)
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	grant(t, a.do("l", "k", "0"), "ok")
	grant(t, a.do("sl", "s", "0 2"), "ok")
	b.req("l", "k", "10")
	testutil.Eventually(t, 5*time.Second, func() bool {
		l := s.Engine.Snapshot(0).Locks
		return len(l) == 1 && l[0].Waiters == 1
	}, "waiter")
	got := a.do("stats", "_", "_")
	for _, want := range []string{`"connections":2`, `"key":"k"`, `"waiters":1`, `"limit":2`, `"holders":1`, `"idle_locks":[]`} {
		if !strings.Contains(got, want) {
			t.Errorf("stats %q lacks %s", got, want)
		}
	}
}

func TestMaxLocksAndWaiters(t *testing.T) {
	s := servertest.StartServer(t, func(e *engine.Config, _ *server.Config) { e.MaxKeys = 2; e.MaxWaiters = 1 })
	a, b, c := dial(t, s.Addr), dial(t, s.Addr), dial(t, s.Addr)
	grant(t, a.do("l", "k1", "0"), "ok")
	grant(t, a.do("l", "k2", "0"), "ok")
	if got := a.do("l", "k3", "0"); got != "error_max_locks" {
		t.Fatalf("got %q, want error_max_locks", got)
	}
	b.req("l", "k1", "10")
	testutil.Eventually(t, 5*time.Second, func() bool {
		for _, l := range s.Engine.Snapshot(0).Locks {
			if l.Key == "k1" && l.Waiters == 1 {
				return true
			}
		}
		return false
	}, "waiter")
	if got := c.do("l", "k1", "10"); got != "error_max_waiters" {
		t.Fatalf("got %q, want error_max_waiters", got)
	}
}

func TestReadTimeoutClosesPartial(t *testing.T) {
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) { c.ReadTimeout = 200 * time.Millisecond })
	idle := dial(t, s.Addr)
	partial := dial(t, s.Addr)
	partial.send("l\nk")
	partial.closed()
	// A connection with no partial request stays open.
	grant(t, idle.do("l", "k", "0"), "ok")
}

func TestMaxConnections(t *testing.T) {
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) { c.MaxConnections = 2 })
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	grant(t, a.do("l", "x", "0"), "ok")
	grant(t, b.do("l", "y", "0"), "ok")
	c := dial(t, s.Addr)
	if got := c.line(); got != "error" {
		t.Fatalf("third connection: got %q, want error", got)
	}
	c.closed()
}

func TestManyConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,000 connections")
	}
	s := servertest.StartServer(t, func(e *engine.Config, _ *server.Config) { e.MaxKeys = 0 })
	const n = 2000
	conns := make([]*client, n)
	for i := range conns {
		conns[i] = dial(t, s.Addr)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, c := range conns {
		wg.Add(1)
		go func(i int, c *client) {
			defer wg.Done()
			key := fmt.Sprintf("k%d", i%50)
			c.req("l", key, "30")
			line, err := c.br.ReadString('\n')
			if err != nil {
				errs <- err
				return
			}
			f := strings.Fields(line)
			if len(f) != 3 || f[0] != "ok" {
				errs <- fmt.Errorf("conn %d: %q", i, line)
				return
			}
			if _, err := c.c.Write([]byte("r\n" + key + "\n" + f[1] + "\n")); err != nil {
				errs <- err
				return
			}
			if line, err = c.br.ReadString('\n'); err != nil || line != "ok\n" {
				errs <- fmt.Errorf("conn %d release: %q %v", i, line, err)
			}
		}(i, c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := s.TCP.Connections(); got != n {
		t.Errorf("Connections() = %d, want %d", got, n)
	}
}
