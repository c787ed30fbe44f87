package engine

import (
	"testing"
	"time"
)

// TestReclaim checks Reclaim: a waiter moves to the new owner with its
// place in the queue and its new Sink (the old one hears Canceled), a
// holder moves with its token and a restarted lease, and nothing is found
// for an owner without an entry or with an expired lease.
func TestReclaim(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	key := []byte("k")
	held := mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: 10 * time.Second})
	for owner := OwnerID(2); owner <= 3; owner++ {
		out, err := e.Acquire(sec, AcquireReq{Key: key, Owner: owner, Limit: 1, TTL: 10 * time.Second,
			Timeout: time.Minute}, rec.sink(owner, "k"))
		if err != nil || out.Result != Queued {
			t.Fatalf("Acquire owner %d = %v, %v; want queued", owner, out.Result, err)
		}
	}
	// Owner 2's client comes back as owner 12: first in line still.
	out, ok := e.Reclaim(2*sec, key, 2, 12, rec.sink(12, "k"))
	if !ok || out.Result != Queued {
		t.Fatalf("Reclaim waiter = %v, %v; want queued, true", out.Result, ok)
	}
	if got := rec.take(); len(got) != 1 || got[0].owner != 2 || got[0].out.Result != Canceled {
		t.Fatalf("after Reclaim the old sink heard %v; want 2:k:canceled", got)
	}
	// Owner 1's client comes back as owner 11 at 9s: same token, lease
	// restarted, so it outlives its first deadline (10s).
	out, ok = e.Reclaim(9*sec, key, 1, 11, nil)
	if !ok || out.Result != Granted || out.Token != held.Token {
		t.Fatalf("Reclaim holder = %+v, %v; want granted with %v", out, ok, held.Token)
	}
	e.Expire(11 * sec)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("the reclaimed lease expired at its old deadline: %v", got)
	}
	if _, ok := e.Reclaim(11*sec, key, 1, 21, nil); ok {
		t.Fatal("Reclaim found an entry of owner 1 after it moved")
	}
	// Dropping the old owners touches nothing moved; releasing the grant
	// hands it to 12 (not 3): the place was kept.
	e.Disconnect(11*sec, 1, true)
	e.Disconnect(11*sec, 2, true)
	if err := e.Release(12*sec, key, held.Token); err != nil {
		t.Fatalf("Release of the reclaimed grant: %v", err)
	}
	if got := rec.take(); len(got) != 1 || got[0].owner != 12 || got[0].out.Result != Granted {
		t.Fatalf("after the release: %v; want 12:k:granted", got)
	}
	// A lease past its deadline is not reclaimed.
	e.Expire(40 * sec)
	if _, ok := e.Reclaim(40*sec, key, 12, 22, nil); ok {
		t.Fatal("Reclaim found an expired lease")
	}
}
