//go:build !race

package engine

import (
	"testing"
	"time"
)

// TestReclaimAllocs: handing a waiter to a new owner and back allocates
// nothing once the owners' lists exist.
func TestReclaimAllocs(t *testing.T) {
	e := newTestEngine(t, nil)
	key := []byte("k")
	mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: time.Minute})
	if _, err := e.Acquire(0, AcquireReq{Key: key, Owner: 2, Limit: 1, TTL: time.Minute, Timeout: time.Hour}, nil); err != nil {
		t.Fatal(err)
	}
	from, to := OwnerID(2), OwnerID(3)
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := e.Reclaim(sec, key, from, to, nil); !ok {
			t.Fatal("nothing reclaimed")
		}
		from, to = to, from
	}); n != 0 {
		t.Fatalf("Reclaim: %v allocs per run; want 0", n)
	}
}
