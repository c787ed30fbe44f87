package main

import (
	"strings"
	"testing"
	"time"
)

// TestMaxWaitersDefault: with default flags a key's queue is capped at
// 1000, so the waiters in memory are bounded by --max-locks x
// --max-waiters (one connection may wait on every key, and each waiter
// costs ~165 B; docs/configuration.md). Before, the cap was off: 2,000
// connections each queued on 1,024 keys in 3 s and took 350 MB.
func TestMaxWaitersDefault(t *testing.T) {
	c := startChild(t, 0, false)
	const cap = 1000
	var open []*rawTCP
	defer func() {
		for _, r := range open {
			_ = r.Close()
		}
	}()
	for i := range cap + 2 {
		r, err := dialTCP(c.tcp)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, r)
		a, err := r.do("e", "hot", "", 10*time.Second)
		if err != nil {
			t.Fatalf("conn %d: %v", i, err)
		}
		want := "queued"
		switch i {
		case 0:
			want = "acquired "
		case cap + 1:
			want = "error_max_waiters"
		}
		if !strings.HasPrefix(a, want) {
			t.Fatalf("conn %d answered %q; want %q (one holder, %d waiters, then the cap)", i, a, want, cap)
		}
	}
}

// TestConnRefusalsLogged: a TCP connection refused at --max-connections
// is logged (a warning with the count, at once, then at most every 10 s).
// Before, 14,100 idle connections had every new client refused for as
// long as they stayed, with /healthz 200 and not one log line.
func TestConnRefusalsLogged(t *testing.T) {
	c := startChild(t, 0, false, "--max-connections", "2")
	var open []*rawTCP
	defer func() {
		for _, r := range open {
			_ = r.Close()
		}
	}()
	for range 2 { // waitReady's probe has closed; these two fill the cap
		r, err := dialTCP(c.tcp)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, r)
		if a, err := r.do("l", "k", "0", 5*time.Second); err != nil || a == "error" {
			t.Fatalf("under the cap: %q %v", a, err)
		}
	}
	r, err := dialTCP(c.tcp)
	if err != nil {
		t.Fatal(err)
	}
	open = append(open, r)
	if a, _ := r.read(5 * time.Second); a != "error" {
		t.Fatalf("over the cap: %q; want error", a)
	}
	line := c.waitLog("connections refused at --max-connections", 5*time.Second)
	if !strings.Contains(line, `"refused": 1`) {
		t.Fatalf("log line %q; want the count (1)", line)
	}
}
