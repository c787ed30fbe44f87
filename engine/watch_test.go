package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// drainEvents takes every buffered event of w as "kind key fence holders waiters".
func drainEvents(t *testing.T, w *Watcher) []string {
	t.Helper()
	var got []string
	for {
		ev, ok, err := w.TryNext()
		if err != nil {
			t.Fatalf("watch ended: %v", err)
		}
		if !ok {
			return got
		}
		got = append(got, fmt.Sprintf("%s %s %d %d %d", ev.Kind, ev.Key, ev.Fence, ev.Holders, ev.Waiters))
	}
}

func wantEvents(t *testing.T, w *Watcher, want ...string) {
	t.Helper()
	got := drainEvents(t, w)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestWatchKey: a key's watcher sees its state, then every grant,
// release, queue change, expiry and drop, in order.
func TestWatchKey(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.FenceSeed = 100 })
	key := []byte("k")
	w, err := e.Watch("k", false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wantEvents(t, w, "state k 0 0 0", "synced k 0 0 0")
	a := mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: time.Second})
	e.Acquire(0, AcquireReq{Key: key, Owner: 2, Limit: 1, Timeout: time.Minute}, &countSink{})
	mustGrant(t, e, 0, AcquireReq{Key: []byte("other"), Owner: 1, Limit: 1})
	wantEvents(t, w, "granted k 101 1 0", "waiters k 0 1 1")
	if err := e.Release(0, key, a.Token); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, w, "released k 101 0 1", "granted k 103 1 0")
	e.Expire(2 * sec) // owner 2's lease (default TTL) is still on
	e.Acquire(2*sec, AcquireReq{Key: key, Owner: 3, Limit: 1, Timeout: time.Minute}, &countSink{})
	e.DropOwner(3*sec, 2)
	wantEvents(t, w, "waiters k 0 1 1", "dropped k 103 0 1", "granted k 104 1 0")
	e.Expire(3*sec + int64(e.Config().DefaultTTL))
	wantEvents(t, w, "expired k 104 0 0")

	// A second watcher starts from the state as it is.
	mustGrant(t, e, 100*sec, AcquireReq{Key: key, Owner: 4, Limit: 1})
	w2, _ := e.Watch("k", false)
	defer w2.Close()
	wantEvents(t, w2, "state k 105 1 0", "synced k 0 0 0")
}

// TestWatchPrefix: a prefix watcher sees the keys under it only.
func TestWatchPrefix(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.FenceSeed = 0 })
	mustGrant(t, e, 0, AcquireReq{Key: []byte("job/a"), Owner: 1, Limit: 1})
	mustGrant(t, e, 0, AcquireReq{Key: []byte("other"), Owner: 1, Limit: 1})
	w, _ := e.Watch("job/", true)
	defer w.Close()
	wantEvents(t, w, "state job/a 1 1 0", "synced job/ 0 0 0")
	mustGrant(t, e, 0, AcquireReq{Key: []byte("job/b"), Owner: 1, Limit: 1})
	mustGrant(t, e, 0, AcquireReq{Key: []byte("jo"), Owner: 1, Limit: 1})
	wantEvents(t, w, "granted job/b 3 1 0")
}

// TestWatchOverflow: a watcher that does not read is cut off at its
// buffer, keeps what it had, and costs nothing afterwards.
func TestWatchOverflow(t *testing.T) {
	e := newTestEngine(t, nil)
	e.Hub().SetLimits(HubLimits{Buffer: 4, Total: 100, Watchers: 2})
	w, _ := e.Watch("k", false)
	for i := range 3 {
		out := mustGrant(t, e, 0, AcquireReq{Key: []byte("k"), Owner: OwnerID(i + 1), Limit: 1})
		e.Release(0, []byte("k"), out.Token)
	}
	n := 0
	for {
		_, ok, err := w.TryNext()
		if ok {
			n++
			continue
		}
		if !errors.Is(err, ErrWatchOverflow) {
			t.Fatalf("after %d events: %v, want ErrWatchOverflow", n, err)
		}
		break
	}
	if n != 4 || e.Hub().Watchers() != 0 {
		t.Fatalf("%d events kept, %d watchers open", n, e.Hub().Watchers())
	}
	// The watcher limit.
	a, _ := e.Watch("a", false)
	b, _ := e.Watch("b", false)
	if _, err := e.Watch("c", false); !errors.Is(err, ErrTooManyWatchers) {
		t.Fatalf("third watcher: %v", err)
	}
	a.Close()
	b.Close()
	if _, err := a.Next(context.Background()); !errors.Is(err, ErrWatchClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	// Total: two watchers share 5 buffered events.
	e.Hub().SetLimits(HubLimits{Buffer: 100, Total: 5, Watchers: 10})
	x, _ := e.Watch("k", false) // 2 events: state, synced
	y, _ := e.Watch("k", false) // 2 more
	mustGrant(t, e, 0, AcquireReq{Key: []byte("k"), Owner: 9, Limit: 1})
	drainEvents(t, x)
	for {
		if _, ok, err := y.TryNext(); !ok {
			if !errors.Is(err, ErrWatchOverflow) {
				t.Fatalf("y: %v, want ErrWatchOverflow at the total", err)
			}
			break
		}
	}
}

// TestWatchReset: Reset ends every watcher with ErrWatchReset.
func TestWatchReset(t *testing.T) {
	e := newTestEngine(t, nil)
	w, _ := e.Watch("k", false)
	p, _ := e.Watch("", true)
	e.Hub().Reset()
	for _, x := range []*Watcher{w, p} {
		drain := func() error {
			for {
				if _, ok, err := x.TryNext(); !ok {
					return err
				}
			}
		}
		if err := drain(); !errors.Is(err, ErrWatchReset) {
			t.Fatalf("after Reset: %v", err)
		}
	}
}

// BenchmarkWatched is an acquire and release of a watched key, the
// watcher draining its events.
func BenchmarkWatched(b *testing.B) {
	e := newTestEngine(b, nil)
	w, _ := e.Watch("k", false)
	defer w.Close()
	req := AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1}
	b.ReportAllocs()
	for b.Loop() {
		out, _ := e.Acquire(0, req, nil)
		e.Release(0, req.Key, out.Token)
		for {
			if _, ok, _ := w.TryNext(); !ok {
				break
			}
		}
	}
}
