package httpfast

import (
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/internal/testutil"
)

// makeIdleKeys creates n idle keys of keyLen bytes through the TCP server.
func makeIdleKeys(t *testing.T, addr string, n, keyLen int) {
	t.Helper()
	c := dialTCP(t, addr)
	// In batches: one connection may hold only its share of the keys.
	const batch = 200
	for lo := 0; lo < n; lo += batch {
		hi := min(n, lo+batch)
		var b strings.Builder
		for i := lo; i < hi; i++ {
			fmt.Fprintf(&b, "l\n%0*d\n0\n", keyLen, i)
		}
		if _, err := c.c.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
		toks := make([]string, hi-lo)
		for i := range toks {
			f := strings.Fields(c.read())
			if len(f) != 3 {
				t.Fatalf("lock %d: %v", lo+i, f)
			}
			toks[i] = f[1]
		}
		b.Reset()
		for i := lo; i < hi; i++ {
			fmt.Fprintf(&b, "r\n%0*d\n%s\n", keyLen, i, toks[i-lo])
		}
		if _, err := c.c.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
		for range hi - lo {
			if got := c.read(); got != "ok" {
				t.Fatalf("release: %q", got)
			}
		}
	}
}

func TestStatsTruncatedREST(t *testing.T) {
	h := startHTTP(t, func(c *Config) { c.MaxStatsBytes = 8 << 10 })
	makeIdleKeys(t, h.ts.Addr, 100, 200)
	r := h.do(call{method: "GET", path: "/v1/stats"}) // checked against the OpenAPI document
	wantStatus(t, "stats", r, http.StatusOK, "")
	totals, _ := r.body["totals"].(map[string]any)
	idle, _ := r.body["idle_locks"].([]any)
	if len(r.raw) > 8<<10 || r.body["truncated"] != true || totals["idle_locks"] != float64(100) ||
		len(idle) == 0 || len(idle) >= 100 {
		t.Fatalf("stats of %d bytes: truncated %v, totals %v, %d idle locks listed; want at most 8 KiB, truncated, 100 in totals",
			len(r.raw), r.body["truncated"], totals, len(idle))
	}
}

// TestStatsNonReadersBoundedREST: connections that pipeline GET /v1/stats
// and never read. The stats bodies held for them stay within the output
// budget (past it the answers carry totals only), the heap with them, and
// the write timeout closes them.
func TestStatsNonReadersBoundedREST(t *testing.T) {
	const (
		conns     = 60
		perConn   = 10
		maxOutput = 2 << 20
		// The bodies held past the budget would be 60 x 10 x 270 KiB,
		// about 160 MiB. Beside the budget's 2 MiB, the connections'
		// own buffers: 2-5 MiB in runs of this test alone, 8 MiB once
		// under a loaded `make test`.
		heapBound = 12 << 20
	)
	h := startHTTP(t, func(c *Config) {
		c.MaxOutput = maxOutput
		c.WriteTimeout = 2 * time.Second
		c.SendBuffer = 16 << 10
	})
	makeIdleKeys(t, h.ts.Addr, 1000, 250) // a stats body of about 270 KiB
	// The live heap, after a collection: what is held, not the garbage
	// the collector's pacing lets pile up (which scales with the base).
	var ms runtime.MemStats
	live := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := live()
	peak, budgetPeak := base, int64(0)
	sample := func() {
		budgetPeak = max(budgetPeak, h.srv.budget.Used())
	}
	req := []byte(strings.Repeat("GET /v1/stats HTTP/1.1\r\nHost: x\r\n\r\n", perConn))
	cs := make([]net.Conn, conns)
	for i := range cs {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		}}
		c, err := d.Dial("tcp", h.srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		cs[i] = c
		sample()
	}
	deadline := time.Now().Add(time.Second) // within WriteTimeout: the stuck bodies are still held
	for i := 0; time.Now().Before(deadline); i++ {
		sample()
		if i%10 == 0 {
			peak = max(peak, live())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("live heap: base %d MiB, peak %d MiB; budget peak %d KiB", base>>20, peak>>20, budgetPeak>>10)
	if peak > base+heapBound {
		t.Errorf("live heap peaked at %d MiB over a %d MiB base, want at most %d MiB more", peak>>20, base>>20, heapBound>>20)
	}
	// The check and the count are not one step: each of the
	// StatsConcurrency builders may pass the budget by one body.
	if limit := int64(maxOutput + 2*(1<<20)); budgetPeak > limit {
		t.Errorf("stats bodies held peaked at %d KiB, want at most %d KiB", budgetPeak>>10, limit>>10)
	}
	// The write timeout closes the connections whose bodies are stuck,
	// and every body is given back.
	testutil.Eventually(t, 5*time.Second, func() bool { return h.srv.budget.Used() == 0 }, "stats bodies not given back")
}

// TestNonReadersBoundedOtherRoutes: the other large answers, pipelined
// by clients that never read, stay within the heap bound too: /metrics
// (built two at a time, counted in the output budget, 503 past it), the
// OpenAPI document (streamed from its one copy, not copied per request)
// and GET /v1/locks/{key} of a key with many waiters (listed up to
// keyListMax, counted). Before, 4,000 such clients took latchd to 456 MB
// (openapi.json) and 1.7 GB (/metrics).
func TestNonReadersBoundedOtherRoutes(t *testing.T) {
	const (
		conns     = 400
		perConn   = 10
		maxOutput = 2 << 20
		heapBound = 40 << 20 // fasthttp's own state per blocked connection, two /metrics builds in flight, the budget (before: 74 MiB)
	)
	for _, path := range []string{"/metrics", "/v1/openapi.json", "/v1/locks/hot"} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			h := startHTTP(t, func(c *Config) {
				c.MaxOutput = maxOutput
				c.WriteTimeout = 2 * time.Second
				c.SendBuffer = 16 << 10
			})
			if path == "/v1/locks/hot" {
				for i := range 5000 {
					req := engine.AcquireReq{Key: []byte("hot"), Owner: engine.OwnerID(i + 1), Limit: 1}
					if _, err := h.ts.Engine.Enqueue(clock.Now(), req); err != nil {
						t.Fatal(err)
					}
				}
			}
			var ms runtime.MemStats
			live := func() uint64 {
				runtime.GC()
				runtime.ReadMemStats(&ms)
				return ms.HeapAlloc
			}
			base := live()
			peak := base
			req := []byte(strings.Repeat("GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n", perConn))
			var cs []net.Conn
			for range conns {
				d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
					return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
				}}
				c, err := d.Dial("tcp", h.srv.Addr())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				cs = append(cs, c)
				if _, err := c.Write(req); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Second) // within WriteTimeout
			for time.Now().Before(deadline) {
				peak = max(peak, live())
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("%s: live heap base %d MiB, peak %d MiB; budget %d", path, base>>20, peak>>20, h.srv.budget.Used())
			if peak > base+heapBound {
				t.Errorf("%s: live heap peaked at %d MiB over a %d MiB base, want at most %d MiB more", path, peak>>20, base>>20, heapBound>>20)
			}
			// The clients leave: every body held for them is given back.
			for _, c := range cs {
				_ = c.Close()
			}
			testutil.Eventually(t, 10*time.Second, func() bool { return h.srv.budget.Used() == 0 }, "bodies not given back")
		})
	}
}
