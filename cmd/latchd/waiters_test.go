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
