//go:build !race

package engine

import (
	"testing"
	"time"
)

// TestAllocs checks that the hot paths allocate nothing once warm: an
// uncontended acquire and release, a renewal, and a hand-off to a parked
// waiter (the race detector allocates, hence the build tag).
func TestAllocs(t *testing.T) {
	e := newTestEngine(t, nil)
	key := []byte("alloc")
	req := AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: time.Minute}
	sink := &countSink{} // long-lived, like a connection's session
	tests := []struct {
		name string
		fn   func()
	}{
		{name: "acquire+release", fn: func() {
			out, err := e.Acquire(0, req, nil)
			if err != nil || out.Result != Granted {
				t.Fatal(out, err)
			}
			if err := e.Release(0, key, out.Token); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "acquire+renew+release", fn: func() {
			out, _ := e.Acquire(0, req, nil)
			if _, err := e.Renew(0, key, out.Token, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := e.Release(0, key, out.Token); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "hand-off to a parked waiter", fn: func() {
			sink.n = 0
			first, _ := e.Acquire(0, req, nil)
			w := AcquireReq{Key: key, Owner: 2, Limit: 1, TTL: time.Minute, Timeout: time.Minute}
			if out, _ := e.Acquire(0, w, sink); out.Result != Queued {
				t.Fatal(out)
			}
			if err := e.Release(0, key, first.Token); err != nil {
				t.Fatal(err)
			}
			if sink.n != 1 {
				t.Fatal("waiter not granted")
			}
			if err := e.Release(0, key, sink.last.Token); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "try-lock on a busy key", fn: func() {
			first, _ := e.Acquire(0, req, nil)
			if out, _ := e.Acquire(0, AcquireReq{Key: key, Owner: 2, Limit: 1}, nil); out.Result != TimedOut {
				t.Fatal(out)
			}
			_ = e.Release(0, key, first.Token)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn() // warm the free lists and pools
			if n := testing.AllocsPerRun(200, tt.fn); n != 0 {
				t.Errorf("%s: %v allocs per run; want 0", tt.name, n)
			}
		})
	}
}

// TestAllocsLockDelay checks that a lease lost to expiry, held back by a
// lock-delay and handed on when it ends allocates nothing once warm.
func TestAllocsLockDelay(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.LockDelay = time.Second })
	key := []byte("delay")
	sink := &countSink{}
	now := int64(0)
	run := func() {
		sink.n = 0
		e.Acquire(now, AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: time.Second}, nil)
		e.Acquire(now, AcquireReq{Key: key, Owner: 2, Limit: 1, TTL: time.Second, Timeout: time.Minute}, sink)
		e.Expire(now + int64(time.Second))
		e.Expire(now + int64(2*time.Second))
		if sink.n != 1 {
			t.Fatal("waiter not granted after the delay")
		}
		e.Release(now+int64(2*time.Second), key, sink.last.Token)
		now += int64(3 * time.Second)
	}
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Fatalf("%v allocs per run", n)
	}
}

// TestAllocsWatched: with a watcher reading, the lock path still
// allocates nothing.
func TestAllocsWatched(t *testing.T) {
	e := newTestEngine(t, nil)
	w, _ := e.Watch("k", false)
	defer w.Close()
	req := AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1}
	n := testing.AllocsPerRun(200, func() {
		out, _ := e.Acquire(0, req, nil)
		e.Release(0, req.Key, out.Token)
		for {
			if _, ok, _ := w.TryNext(); !ok {
				break
			}
		}
	})
	if n != 0 {
		t.Fatalf("%v allocs per acquire+release with a watcher", n)
	}
}

// TestSetAllocs checks that taking and releasing a free set of keys
// allocates nothing once warm.
func TestSetAllocs(t *testing.T) {
	e := newTestEngine(t, nil)
	req := &SetReq{Keys: [][]byte{[]byte("a"), []byte("b"), []byte("c")}, Owner: 1, Limit: 1, TTL: time.Minute}
	n := testing.AllocsPerRun(100, func() {
		out, err := e.AcquireSet(0, req, nil)
		if err != nil || out.Result != Granted {
			t.Fatal(out.Result, err)
		}
		if err := e.ReleaseSet(0, req.Keys, out.Tokens[:3], nil); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("acquire+release of a set: %v allocs, want 0", n)
	}
}
