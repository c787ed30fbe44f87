package engine

import (
	"errors"
	"testing"
	"time"
)

// TestDrain: parked requests hear Drained, enqueues are withdrawn, nothing
// is granted afterwards (not even the slot a holder frees), new requests
// fail with ErrDraining, and releases and renewals keep working.
func TestDrain(t *testing.T) {
	e := newTestEngine(t, nil)
	var r recorder
	req := func(owner OwnerID, key string) AcquireReq {
		return AcquireReq{Key: []byte(key), Owner: owner, Limit: 1, TTL: 10 * time.Second, Timeout: 5 * time.Second}
	}
	held, err := e.Acquire(0, req(1, "a"), r.sink(1, "a"))
	if err != nil || held.Result != Granted {
		t.Fatalf("first acquire: %v %v", held, err)
	}
	if o, _ := e.Acquire(0, req(2, "a"), r.sink(2, "a")); o.Result != Queued {
		t.Fatalf("second acquire: %v", o.Result)
	}
	if o, _ := e.Enqueue(0, req(3, "a")); o.Result != Queued {
		t.Fatalf("enqueue: %v", o.Result)
	}
	enq, _ := e.Enqueue(0, req(4, "b")) // granted at once, collected later
	if n := e.Drain(sec); n != 2 {
		t.Fatalf("Drain withdrew %d waits, want 2", n)
	}
	if got := r.take(); len(got) != 1 || got[0].owner != 2 || got[0].out.Result != Drained {
		t.Fatalf("heard %v, want owner 2 drained", got)
	}
	if _, err := e.Acquire(sec, req(5, "c"), r.sink(5, "c")); !errors.Is(err, ErrDraining) {
		t.Fatalf("acquire while draining: %v", err)
	}
	if _, err := e.Enqueue(sec, req(5, "c")); !errors.Is(err, ErrDraining) {
		t.Fatalf("enqueue while draining: %v", err)
	}
	if _, err := e.Wait(sec, []byte("a"), 3, time.Second, r.sink(3, "a")); !errors.Is(err, ErrDraining) {
		t.Fatalf("wait of a withdrawn enqueue: %v", err)
	}
	if o, err := e.Wait(sec, []byte("b"), 4, time.Second, r.sink(4, "b")); err != nil || o.Token != enq.Token {
		t.Fatalf("wait collecting an earlier grant: %v %v", o, err)
	}
	if _, err := e.Renew(sec, []byte("a"), held.Token, 0); err != nil {
		t.Fatalf("renew while draining: %v", err)
	}
	if err := e.Release(sec, []byte("a"), held.Token); err != nil {
		t.Fatalf("release while draining: %v", err)
	}
	e.Expire(100 * sec)
	if got := r.take(); len(got) != 0 {
		t.Fatalf("heard %v after the drain", got)
	}
	if _, g := e.Metrics(); g.Waiting != 0 || g.Held != 0 {
		t.Fatalf("gauges %+v, want nothing held or waiting", g)
	}
}
