package engine

import (
	"testing"
	"time"
)

// TestSetHandOffAllocs: a set that queues behind a held key and is then
// granted, timed out or canceled allocates nothing once warm (its set
// record is reused).
func TestSetHandOffAllocs(t *testing.T) {
	e := newTestEngine(t, nil)
	req := setReq(1, time.Hour, "a", "b")
	hold := AcquireReq{Key: []byte("a"), Owner: 2, Limit: 1, TTL: time.Minute}
	sink := &setRec{got: make([]SetOutcome, 0, 4)}
	now := int64(0)
	run := func() {
		h, _ := e.Acquire(now, hold, nil)
		if out, _ := e.AcquireSet(now, req, sink); out.Result != Queued {
			t.Fatal(out.Result)
		}
		e.Release(now, hold.Key, h.Token)
		got := sink.got[0]
		sink.got = sink.got[:0]
		if got.Result != Granted {
			t.Fatal(got.Result)
		}
		if err := e.ReleaseSet(now, req.Keys, got.Tokens[:2], nil); err != nil {
			t.Fatal(err)
		}
		// A set that times out gives its record back too.
		h, _ = e.Acquire(now, hold, nil)
		short := *req
		short.Timeout = time.Millisecond
		if out, _ := e.AcquireSet(now, &short, sink); out.Result != Queued {
			t.Fatal(out.Result)
		}
		now += int64(time.Second)
		e.Expire(now)
		if len(sink.got) != 1 || sink.got[0].Result != TimedOut {
			t.Fatalf("heard %v, want TimedOut", sink.got)
		}
		sink.got = sink.got[:0]
		e.Release(now, hold.Key, h.Token)
	}
	run() // warm: keys, entries and the free list exist
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Fatalf("set hand-off: %v allocs, want 0", n)
	}
}

// TestSetRecordReuse: a finished set's record serves the next set, and a
// stale reference (a set noted pending twice) does not touch the reused
// record.
func TestSetRecordReuse(t *testing.T) {
	e := newTestEngine(t, nil)
	var sink setRec
	h, _ := e.Acquire(0, AcquireReq{Key: []byte("a"), Owner: 2, Limit: 1, TTL: time.Minute}, nil)
	if out, _ := e.AcquireSet(0, setReq(1, time.Hour, "a", "b"), &sink); out.Result != Queued {
		t.Fatal(out.Result)
	}
	first := e.sets.head
	e.sets.note(first) // a stale place in the pending list
	e.Release(0, []byte("a"), h.Token)
	got := sink.take()
	if len(got) != 1 || got[0].Result != Granted {
		t.Fatalf("heard %v, want one Granted", got)
	}
	if e.sets.free != first || first.refs != 0 {
		t.Fatalf("finished set not on the free list (refs %d)", first.refs)
	}
	if err := e.ReleaseSet(0, keysOf("a", "b"), got[0].Tokens[:2], nil); err != nil {
		t.Fatal(err)
	}
}
