package engine

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAcquireRelease measures an acquire and its release: one owner
// on one key (uncontended), one key per goroutine in parallel, all
// goroutines on one hot key, and a semaphore with limit 4.
func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("uncontended", func(b *testing.B) {
		e := newTestEngine(b, nil)
		req := AcquireReq{Key: []byte("bench"), Owner: 1, Limit: 1, TTL: time.Minute}
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
	b.Run("parallel", func(b *testing.B) {
		e := newTestEngine(b, nil)
		var next atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			id := next.Add(1)
			req := AcquireReq{Key: []byte("bench-" + strconv.FormatUint(id, 10)), Owner: OwnerID(id), Limit: 1, TTL: time.Minute}
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
	b.Run("hot_key", func(b *testing.B) {
		// Every goroutine try-locks one key; a loser retries. Both the
		// grants and the refusals go through the one shard lock.
		e := newTestEngine(b, nil)
		var next atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := AcquireReq{Key: []byte("hot"), Owner: OwnerID(next.Add(1)), Limit: 1, TTL: time.Minute}
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
	b.Run("semaphore", func(b *testing.B) {
		e := newTestEngine(b, nil)
		var next atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := AcquireReq{Key: []byte("sem"), Owner: OwnerID(next.Add(1)), Limit: 4, TTL: time.Minute}
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
}

// BenchmarkHandOff measures a release that grants a parked waiter: the
// FIFO queue path, including the Sink call.
func BenchmarkHandOff(b *testing.B) {
	e := newTestEngine(b, nil)
	key := []byte("handoff")
	sink := &countSink{}
	a := AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: time.Minute, Timeout: time.Minute}
	w := AcquireReq{Key: key, Owner: 2, Limit: 1, TTL: time.Minute, Timeout: time.Minute}
	held, _ := e.Acquire(0, a, nil)
	tok := held.Token
	b.ReportAllocs()
	for b.Loop() {
		if out, _ := e.Acquire(0, w, sink); out.Result != Queued {
			b.Fatal(out)
		}
		if err := e.Release(0, key, tok); err != nil {
			b.Fatal(err)
		}
		tok = sink.last.Token
	}
}

// countSink counts deliveries and keeps the last.
type countSink struct {
	n    int
	last Outcome
}

func (s *countSink) Deliver(o Outcome) { s.n++; s.last = o }
