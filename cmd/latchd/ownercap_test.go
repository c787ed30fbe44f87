package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMaxKeysPerOwnerDefault: with default flags one connection or session
// may hold or wait on 256 keys (a quarter of the default --max-locks), so
// it cannot take every key; 0 means no cap, as for every other cap, and the
// value does not follow --max-locks.
func TestMaxKeysPerOwnerDefault(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want int
	}{
		{name: "default", want: 256},
		{name: "max-locks does not change it", args: []string{"--max-locks", "100"}, want: 256},
		{name: "no cap on keys", args: []string{"--max-locks", "0"}, want: 256},
		{name: "zero is no cap", args: []string{"--max-keys-per-owner", "0"}, want: 0},
		{name: "explicit", args: []string{"--max-locks", "0", "--max-keys-per-owner", "10"}, want: 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, func(string) string { return "" }, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			c, err := o.engineConfig()
			if err != nil {
				t.Fatalf("%v: %v", tt.args, err)
			}
			if c.MaxKeysPerOwner != tt.want {
				t.Errorf("%v: max keys per owner %d, want %d", tt.args, c.MaxKeysPerOwner, tt.want)
			}
		})
	}
	if _, err := parseOptions([]string{"--max-keys-per-owner", "-1"}, func(string) string { return "" }, &bytes.Buffer{}); err == nil {
		t.Fatal("--max-keys-per-owner -1 accepted")
	}
}

// childHeap reads the child's HeapAlloc from its pprof heap page, running
// a collection first when gc is set.
func childHeap(t *testing.T, debugAddr string, gc bool) uint64 {
	t.Helper()
	url := "http://" + debugAddr + "/debug/pprof/heap?debug=1"
	if gc {
		url += "&gc=1"
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`# HeapAlloc = (\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no HeapAlloc in the heap page")
	}
	n, _ := strconv.ParseUint(string(m[1]), 10, 64)
	return n
}

// TestWaiterFloodMemoryReturns is a waiter flood in
// small: connections each enqueue on 1,024 keys (with --max-waiters 0), a
// collection runs, then they all close. The waiters' entries, live at the last collection, became
// garbage that nothing collected: the heap stayed at its peak (154 MB for
// a million waiters, 14 s later) until the runtime's forced collection two
// minutes on. It must come back to within 2x of the idle baseline within
// 10 s, without anybody forcing a collection.
func TestWaiterFloodMemoryReturns(t *testing.T) {
	const conns, keys = 150, 1024
	debug := freePort(t)
	c := startChild(t, 0, false, "--max-waiters", "0", "--max-keys-per-owner", strconv.Itoa(keys), "--debug-addr", debug)
	var req strings.Builder
	for i := range keys {
		fmt.Fprintf(&req, "e\nkey%d\n\n", i)
	}
	// flood opens n connections that each enqueue on every key, and
	// returns them open once every answer is in.
	flood := func(n int) []*rawTCP {
		rs := make([]*rawTCP, n)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range rs {
			r, err := dialTCP(c.tcp)
			if err != nil {
				t.Fatal(err)
			}
			rs[i] = r
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := r.c.Write([]byte(req.String())); err != nil {
					errs <- err
					return
				}
				for range keys {
					a, err := r.read(30 * time.Second)
					if err != nil || !(a == "queued" || strings.HasPrefix(a, "acquired ")) {
						errs <- fmt.Errorf("answer %q: %v", a, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		return rs
	}
	closeAll := func(rs []*rawTCP) {
		for _, r := range rs {
			_ = r.Close()
		}
	}
	closeAll(flood(2)) // warm buffers and pools any use fills
	waitNoWaiters := func() {
		deadline := time.Now().Add(10 * time.Second)
		var a string
		for {
			r, err := dialTCP(c.tcp)
			if err == nil {
				a, _ = r.do("stats", "_", "_", 5*time.Second)
				_ = r.Close()
				// Only this connection, and no key held (nor waited on).
				if strings.Contains(a, `"connections":1,`) && strings.Contains(a, `"locks":[]`) {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the warm-up's connections and waiters still there after 10 s: %.200s", a)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitNoWaiters()
	base := childHeap(t, debug, true)
	rs := flood(conns)
	// A collection while every waiter is queued, as in the red team's run,
	// where the last one before the close came late in the flood: what
	// the close frees was live at the last collection.
	peak := childHeap(t, debug, true)
	closeAll(rs)
	closed := time.Now()
	var now uint64
	for time.Since(closed) < 10*time.Second {
		// Polled slowly: each read of the heap page allocates, and enough
		// of that garbage would start a collection by itself.
		time.Sleep(500 * time.Millisecond)
		if now = childHeap(t, debug, false); now <= 2*base {
			t.Logf("heap: idle %d KiB, with the waiters %d KiB, %d KiB %v after the close", base>>10, peak>>10, now>>10, time.Since(closed).Round(100*time.Millisecond))
			return
		}
	}
	t.Fatalf("heap %d KiB 10 s after %d connections x %d waiters closed; idle baseline %d KiB, bound 2x", now>>10, conns, keys, base>>10)
}
