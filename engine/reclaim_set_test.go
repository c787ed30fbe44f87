package engine

import (
	"testing"
	"time"
)

// TestReclaimSetKeepsItsPlace: a waiting set taken over by another owner
// keeps its place in every queue and its deadline; its old sink hears
// Canceled, the new one the grant; the old owner's disconnect no longer
// touches it, the new owner's does. A set granted, or of another owner,
// is not found.
func TestReclaimSetKeepsItsPlace(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	var old, cur setRec
	hb := mustGrant(t, e, 0, AcquireReq{Key: []byte("b"), Owner: 9, Limit: 1, TTL: time.Hour})
	if out, _ := e.AcquireSet(0, setReq(1, time.Minute, "a", "b"), &old); out.Result != Queued {
		t.Fatalf("set = %v, want queued", out.Result)
	}
	if o, _ := e.Acquire(0, AcquireReq{Key: []byte("b"), Owner: 2, Limit: 1, Timeout: time.Hour}, rec.sink(2, "b")); o.Result != Queued {
		t.Fatalf("single on b = %v, want queued behind the set", o.Result)
	}
	if e.ReclaimSet(0, []byte("b"), 1, 11, &cur) || e.ReclaimSet(0, []byte("a"), 3, 11, &cur) {
		t.Fatal("ReclaimSet found a set by its second key, or of another owner")
	}
	if !e.ReclaimSet(sec, []byte("a"), 1, 11, &cur) {
		t.Fatal("ReclaimSet did not find owner 1's waiting set")
	}
	if g := old.take(); len(g) != 1 || g[0].Result != Canceled {
		t.Fatalf("old sink heard %+v, want canceled", g)
	}
	e.Disconnect(sec, 1, true) // the old owner's connection: nothing of it is left
	info, _ := e.Inspect(sec, "b")
	if len(info.Waiters) != 2 || info.Waiters[0].Owner != 11 || info.Waiters[1].Owner != 2 {
		t.Fatalf("b's queue = %+v; want the set (owner 11) ahead of owner 2", info.Waiters)
	}
	if err := e.Release(2*sec, []byte("b"), hb.Token); err != nil {
		t.Fatal(err)
	}
	got := cur.take()
	if len(got) != 1 || got[0].Result != Granted || got[0].N != 2 {
		t.Fatalf("new sink heard %+v, want granted", got)
	}
	if g := rec.take(); len(g) != 0 {
		t.Fatalf("owner 2 heard %v before the set", g)
	}
	if e.ReclaimSet(2*sec, []byte("a"), 11, 12, &cur) {
		t.Fatal("ReclaimSet found a set already granted")
	}
	// The new owner's disconnect releases the set it now holds.
	e.Disconnect(2*sec, 11, true)
	if g := rec.take(); len(g) != 1 || g[0].out.Result != Granted {
		t.Fatalf("owner 2 heard %v, want granted once the set's owner left", g)
	}
	// A waiting set taken over by its own owner (a session's retry)
	// keeps its deadline: it times out when it would have.
	var s3, s3b setRec
	e.AcquireSet(2*sec, setReq(3, time.Second, "b", "c"), &s3)
	if !e.ReclaimSet(2*sec, []byte("b"), 3, 3, &s3b) {
		t.Fatal("ReclaimSet by the same owner did not find its set")
	}
	e.Expire(4 * sec)
	if g := s3b.take(); len(g) != 1 || g[0].Result != TimedOut {
		t.Fatalf("reclaimed set heard %+v, want timed_out at its first deadline", g)
	}
}
