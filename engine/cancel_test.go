package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestCancelWait: a parked request withdrawn by CancelWait hears Canceled
// and leaves the queue, so the next release grants the waiter behind it;
// the owner's other wait and its holdings stay; a second cancel, or one
// after the grant, finds nothing.
func TestCancelWait(t *testing.T) {
	e := newTestEngine(t, nil)
	var r recorder
	k := []byte("k")
	req := func(owner OwnerID, limit int) AcquireReq {
		return AcquireReq{Key: k, Owner: owner, Limit: limit, TTL: time.Minute, Timeout: time.Minute}
	}
	h := mustGrant(t, e, 0, req(1, 1))
	for _, owner := range []OwnerID{2, 3} {
		if out, err := e.Acquire(sec, req(owner, 1), r.sink(owner, "k")); err != nil || out.Result != Queued {
			t.Fatalf("Acquire by %d = %v, %v; want queued", owner, out.Result, err)
		}
	}
	// Owner 2 also waits on another key: that wait must stay.
	mustGrant(t, e, 0, AcquireReq{Key: []byte("other"), Owner: 9, Limit: 1, TTL: time.Minute})
	if out, _ := e.Acquire(sec, AcquireReq{Key: []byte("other"), Owner: 2, Limit: 1, TTL: time.Minute, Timeout: time.Minute},
		r.sink(2, "other")); out.Result != Queued {
		t.Fatalf("Acquire other by 2 = %v; want queued", out.Result)
	}
	if !e.CancelWait(2*sec, k, 2) {
		t.Fatal("CancelWait(k, 2) = false; want true")
	}
	if got := fmt.Sprint(r.take()); got != "[2:k:canceled]" {
		t.Fatalf("after cancel heard %s; want [2:k:canceled]", got)
	}
	if e.CancelWait(2*sec, k, 2) || e.CancelWait(2*sec, k, 1) || e.CancelWait(2*sec, []byte("none"), 3) {
		t.Fatal("CancelWait found a wait that is not there")
	}
	if err := e.Release(3*sec, k, h.Token); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(r.take()); got != "[3:k:granted]" {
		t.Fatalf("after release heard %s; want [3:k:granted] (the canceled waiter skipped)", got)
	}
	if e.CancelWait(4*sec, k, 3) {
		t.Fatal("CancelWait after the grant = true; want false: the grant is the caller's to release")
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	e.DropOwner(5*sec, 2) // its wait on "other" is still there
	if got := fmt.Sprint(r.take()); got != "[2:other:canceled]" {
		t.Fatalf("DropOwner(2) heard %s; want [2:other:canceled]", got)
	}
}

// TestCancelWaitWithoutSink: a replica applies a parked request with no
// Sink (only the proposing node has one); CancelWait must withdraw it
// there too, and leave a two-phase enqueue that is not waited on alone.
func TestCancelWaitWithoutSink(t *testing.T) {
	e := newTestEngine(t, nil)
	k := []byte("k")
	mustGrant(t, e, 0, AcquireReq{Key: k, Owner: 1, Limit: 1, TTL: time.Minute})
	if out, _ := e.Acquire(sec, AcquireReq{Key: k, Owner: 2, Limit: 1, TTL: time.Minute, Timeout: time.Minute}, nil); out.Result != Queued {
		t.Fatalf("Acquire by 2 = %v; want queued", out.Result)
	}
	if out, _ := e.Enqueue(sec, AcquireReq{Key: k, Owner: 3, Limit: 1, TTL: time.Minute}); out.Result != Queued {
		t.Fatalf("Enqueue by 3 = %v; want queued", out.Result)
	}
	if e.CancelWait(2*sec, k, 3) {
		t.Fatal("CancelWait withdrew an enqueue nobody waits on")
	}
	if !e.CancelWait(2*sec, k, 2) {
		t.Fatal("CancelWait(k, 2) without a sink = false; want true")
	}
	if _, g := e.Metrics(); g.Waiting != 1 {
		t.Fatalf("waiting = %d; want 1 (owner 3's enqueue)", g.Waiting)
	}
}
