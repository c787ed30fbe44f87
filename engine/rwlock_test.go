package engine

import (
	"sync/atomic"
	"testing"
	"time"
)

// rw returns a read-write request of owner on key.
func rw(key string, owner OwnerID, mode Mode, timeout time.Duration) AcquireReq {
	return AcquireReq{Key: []byte(key), Owner: owner, Mode: mode, TTL: time.Minute, Timeout: timeout}
}

func TestRWReadersShareWriterExcludes(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	r1 := mustGrant(t, e, 0, rw("k", 1, ModeRead, 0))
	r2 := mustGrant(t, e, 0, rw("k", 2, ModeRead, 0))
	if r2.Token.Fence <= r1.Token.Fence {
		t.Fatalf("second reader's fence %d not above %d", r2.Token.Fence, r1.Token.Fence)
	}
	// A try-write on a read-held key times out; a blocking one queues.
	if out, err := e.Acquire(0, rw("k", 3, ModeWrite, 0), nil); err != nil || out.Result != TimedOut {
		t.Fatalf("try-write over readers = %v, %v; want timed_out", out.Result, err)
	}
	if out, _ := e.Acquire(0, rw("k", 3, ModeWrite, time.Minute), rec.sink(3, "k")); out.Result != Queued {
		t.Fatalf("write over readers = %v; want queued", out.Result)
	}
	// A reader after a waiting writer does not overtake it.
	if out, _ := e.Acquire(0, rw("k", 4, ModeRead, time.Minute), rec.sink(4, "k")); out.Result != Queued {
		t.Fatalf("read behind a waiting writer = %v; want queued", out.Result)
	}
	if out, _ := e.Acquire(0, rw("k", 5, ModeRead, time.Minute), rec.sink(5, "k")); out.Result != Queued {
		t.Fatalf("read behind a waiting writer = %v; want queued", out.Result)
	}
	if err := e.Release(0, []byte("k"), r1.Token); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("granted %v while a reader still holds", got)
	}
	if err := e.Release(0, []byte("k"), r2.Token); err != nil {
		t.Fatal(err)
	}
	got := rec.take()
	if len(got) != 1 || got[0].owner != 3 || got[0].out.Result != Granted {
		t.Fatalf("after the readers left: %v; want the writer granted alone", got)
	}
	w := got[0].out.Token
	if w.Fence <= r2.Token.Fence {
		t.Fatalf("writer's fence %d not above the readers' %d", w.Fence, r2.Token.Fence)
	}
	// The writer leaves: both readers at the head are granted together.
	if err := e.Release(0, []byte("k"), w); err != nil {
		t.Fatal(err)
	}
	got = rec.take()
	if len(got) != 2 || got[0].owner != 4 || got[1].owner != 5 {
		t.Fatalf("after the writer left: %v; want readers 4 and 5 granted in order", got)
	}
	if got[0].out.Token.Fence <= w.Fence || got[1].out.Token.Fence <= got[0].out.Token.Fence {
		t.Fatalf("fences not rising: writer %d, readers %d %d", w.Fence, got[0].out.Token.Fence, got[1].out.Token.Fence)
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestRWQueueFIFO checks a mixed queue is granted in order, in batches of
// consecutive readers, each writer alone.
func TestRWQueueFIFO(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	first := mustGrant(t, e, 0, rw("k", 1, ModeWrite, 0))
	modes := []Mode{ModeRead, ModeRead, ModeWrite, ModeRead, ModeWrite, ModeWrite, ModeRead, ModeRead}
	for i, m := range modes {
		o := OwnerID(10 + i)
		if out, _ := e.Acquire(0, rw("k", o, m, time.Minute), rec.sink(o, "k")); out.Result != Queued {
			t.Fatalf("waiter %d: %v", i, out.Result)
		}
	}
	want := [][]OwnerID{{10, 11}, {12}, {13}, {14}, {15}, {16, 17}}
	held := []Outcome{first}
	last := first.Token.Fence
	for step, batch := range want {
		for _, h := range held {
			if err := e.Release(0, []byte("k"), h.Token); err != nil {
				t.Fatal(err)
			}
		}
		got := rec.take()
		if len(got) != len(batch) {
			t.Fatalf("step %d: granted %v; want owners %v", step, got, batch)
		}
		held = held[:0]
		for i, h := range got {
			if h.owner != batch[i] || h.out.Token.Fence <= last {
				t.Fatalf("step %d: granted %v (fence %d after %d); want owners %v", step, got, h.out.Token.Fence, last, batch)
			}
			last = h.out.Token.Fence
			held = append(held, h.out)
		}
	}
}

func TestRWMismatch(t *testing.T) {
	e := newTestEngine(t, nil)
	lock := AcquireReq{Key: []byte("lk"), Owner: 1, Limit: 1, TTL: time.Minute}
	mustGrant(t, e, 0, lock)
	for _, m := range []Mode{ModeRead, ModeWrite} {
		if _, err := e.Acquire(0, rw("lk", 2, m, 0), nil); err != ErrLimitMismatch {
			t.Fatalf("%v on a held lock: %v; want ErrLimitMismatch", m, err)
		}
	}
	mustGrant(t, e, 0, rw("rk", 1, ModeRead, 0))
	for _, limit := range []int{1, 3} {
		req := AcquireReq{Key: []byte("rk"), Owner: 2, Limit: limit}
		if _, err := e.Acquire(0, req, nil); err != ErrLimitMismatch {
			t.Fatalf("limit %d on a read-held key: %v; want ErrLimitMismatch", limit, err)
		}
		if _, err := e.Enqueue(0, req); err != ErrLimitMismatch {
			t.Fatalf("enqueue limit %d on a read-held key: %v; want ErrLimitMismatch", limit, err)
		}
	}
	if _, err := e.Acquire(0, AcquireReq{Key: []byte("x"), Owner: 1, Mode: 9}, nil); err != ErrBadRequest {
		t.Fatalf("mode 9: %v; want ErrBadRequest", err)
	}
}

func TestRWDropOwnerAndTimeouts(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	mustGrant(t, e, 0, rw("k", 1, ModeRead, 0))
	// Owner 2 waits to write; readers 3 and 4 queue behind it.
	e.Acquire(0, rw("k", 2, ModeWrite, time.Second), rec.sink(2, "k"))
	e.Acquire(0, rw("k", 3, ModeRead, time.Minute), rec.sink(3, "k"))
	e.Acquire(0, rw("k", 4, ModeRead, time.Minute), rec.sink(4, "k"))
	// The writer's wait runs out: the readers behind it join the reader.
	e.Expire(2 * sec)
	got := rec.take()
	if len(got) != 3 || got[0].owner != 2 || got[0].out.Result != TimedOut ||
		got[1].owner != 3 || got[2].owner != 4 || got[2].out.Result != Granted {
		t.Fatalf("after the writer timed out: %v", got)
	}
	// A writer queues; CancelWait withdraws it and a reader behind goes.
	e.Acquire(2*sec, rw("k", 5, ModeWrite, time.Minute), rec.sink(5, "k"))
	e.Acquire(2*sec, rw("k", 6, ModeRead, time.Minute), rec.sink(6, "k"))
	if !e.CancelWait(2*sec, []byte("k"), 5) {
		t.Fatal("CancelWait found no wait")
	}
	if got := rec.take(); len(got) != 2 || got[0].out.Result != Canceled || got[1].owner != 6 || got[1].out.Result != Granted {
		t.Fatalf("after cancel: %v", got)
	}
	// A writer waits; every reader disconnects: the writer is granted.
	e.Acquire(2*sec, rw("k", 7, ModeWrite, time.Minute), rec.sink(7, "k"))
	for _, o := range []OwnerID{1, 3, 4, 6} {
		e.DropOwner(2*sec, o)
	}
	if got := rec.take(); len(got) != 1 || got[0].owner != 7 || got[0].out.Result != Granted {
		t.Fatalf("after the readers dropped: %v", got)
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestRWTwoPhase(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	w, err := e.Enqueue(0, rw("k", 1, ModeWrite, 0))
	if err != nil || w.Result != Granted {
		t.Fatalf("enqueue write on a free key: %v %v", w.Result, err)
	}
	if out, _ := e.Enqueue(0, rw("k", 2, ModeRead, 0)); out.Result != Queued {
		t.Fatalf("enqueue read behind a writer: %v", out.Result)
	}
	if out, _ := e.Enqueue(0, rw("k", 3, ModeRead, 0)); out.Result != Queued {
		t.Fatalf("enqueue read behind a writer: %v", out.Result)
	}
	if out, _ := e.Wait(0, []byte("k"), 1, 0, nil); out.Result != Granted || out.Token != w.Token {
		t.Fatalf("writer's wait: %v", out)
	}
	if out, _ := e.Wait(0, []byte("k"), 2, time.Minute, rec.sink(2, "k")); out.Result != Queued {
		t.Fatalf("reader's wait: %v", out.Result)
	}
	if err := e.Release(0, []byte("k"), w.Token); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 1 || got[0].out.Result != Granted {
		t.Fatalf("reader 2 after the writer: %v", got)
	}
	// Reader 3 was granted with 2 (same batch) and collects it now.
	if out, _ := e.Wait(0, []byte("k"), 3, 0, nil); out.Result != Granted {
		t.Fatalf("reader 3's wait: %v", out.Result)
	}
}

func TestRWStateRoundTrip(t *testing.T) {
	e := newTestEngine(t, nil)
	mustGrant(t, e, 0, rw("k", 1, ModeRead, 0))
	mustGrant(t, e, 0, rw("k", 2, ModeRead, 0))
	e.Acquire(0, rw("k", 3, ModeWrite, time.Minute), restoredSink{})
	e.Acquire(0, rw("k", 4, ModeRead, time.Minute), restoredSink{})
	state := writeState(t, e)
	c := readState(t, e.Config(), state)
	markParked(c)
	if got, want := c.dumpState(), e.dumpState(); got != want {
		t.Fatalf("restored:\n%s\nwant:\n%s", got, want)
	}
	st := c.Snapshot(0)
	if len(st.RWLocks) != 1 || st.RWLocks[0].Mode != "read" || st.RWLocks[0].Holders != 2 || st.RWLocks[0].WritersWaiting != 1 {
		t.Fatalf("stats of the restored key: %+v", st.RWLocks)
	}
}

// BenchmarkRW measures read and write acquire+release: one reader alone,
// readers in parallel on one key, and writers on one hot key (try-lock).
func BenchmarkRW(b *testing.B) {
	b.Run("read_uncontended", func(b *testing.B) {
		e := newTestEngine(b, nil)
		req := rw("bench", 1, ModeRead, 0)
		b.ReportAllocs()
		for b.Loop() {
			out, err := e.Acquire(0, req, nil)
			if err != nil || out.Result != Granted {
				b.Fatal(out, err)
			}
			if err := e.Release(0, req.Key, out.Token); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read_hot_key", func(b *testing.B) {
		e := newTestEngine(b, nil)
		var next atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := rw("hot", OwnerID(next.Add(1)), ModeRead, 0)
			for pb.Next() {
				out, err := e.Acquire(0, req, nil)
				if err != nil || out.Result != Granted {
					b.Fatal(out, err)
				}
				if err := e.Release(0, req.Key, out.Token); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("write_hot_key", func(b *testing.B) {
		e := newTestEngine(b, nil)
		var next atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := rw("hot", OwnerID(next.Add(1)), ModeWrite, 0)
			for pb.Next() {
				out, err := e.Acquire(0, req, nil)
				if err != nil {
					b.Fatal(err)
				}
				if out.Result == Granted {
					if err := e.Release(0, req.Key, out.Token); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	})
	b.Run("hand_off_readers", func(b *testing.B) {
		// A writer releases to two parked readers, who release to the
		// next parked writer.
		e := newTestEngine(b, nil)
		s1, s2, sw := &countSink{}, &countSink{}, &countSink{}
		tok := mustGrant(b, e, 0, rw("h", 1, ModeWrite, 0)).Token
		b.ReportAllocs()
		for b.Loop() {
			e.Acquire(0, rw("h", 2, ModeRead, time.Minute), s1)
			e.Acquire(0, rw("h", 3, ModeRead, time.Minute), s2)
			e.Acquire(0, rw("h", 1, ModeWrite, time.Minute), sw)
			if err := e.Release(0, []byte("h"), tok); err != nil {
				b.Fatal(err)
			}
			_ = e.Release(0, []byte("h"), s1.last.Token)
			_ = e.Release(0, []byte("h"), s2.last.Token)
			tok = sw.last.Token
		}
	})
}

// BenchmarkRWManyReaders releases and retakes one of 200 read holds of
// one key, in a scattered order, as 200 connections on two event loops
// do.
func BenchmarkRWManyReaders(b *testing.B) {
	e := newTestEngine(b, nil)
	const n = 200
	var toks [n]Outcome
	for i := range toks {
		toks[i] = mustGrant(b, e, 0, rw("many", OwnerID(i+1), ModeRead, 0))
	}
	key := []byte("many")
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i = (i + 37) % n // a stride: not the oldest hold
		if err := e.Release(0, key, toks[i].Token); err != nil {
			b.Fatal(err)
		}
		out, err := e.Acquire(0, rw("many", OwnerID(i+1), ModeRead, 0), nil)
		if err != nil || out.Result != Granted {
			b.Fatal(out, err)
		}
		toks[i] = out
	}
}
