package engine

import (
	"errors"
	"testing"
	"time"
)

// TestSessionExpiryManyDue opens thousands of sessions with staggered
// deadlines, touches some and keeps some busy, and checks that one Expire
// ends exactly the idle sessions that are due.
func TestSessionExpiryManyDue(t *testing.T) {
	e := newTestEngine(t, nil)
	const n = 3000
	const ms = int64(time.Millisecond)
	ttl := 10 * time.Second
	for i := range n {
		if err := e.OpenSession(int64(i)*ms, OwnerID(i+1), ttl); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i += 3 { // touched at 2 s: due at 12 s
		if !e.BeginSession(2*sec, OwnerID(i+1)) {
			t.Fatalf("BeginSession(%d) = false", i+1)
		}
		e.EndSession(2*sec, OwnerID(i+1))
	}
	for i := 0; i < n; i += 7 { // busy: never due
		e.BeginSession(2*sec, OwnerID(i+1))
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if got := e.NextDeadline(); got != 10*sec+ms {
		t.Fatalf("NextDeadline = %d; want %d (session 2, the first idle one)", got, 10*sec+ms)
	}
	e.Expire(10*sec - 1)
	if got := e.Sessions(); got != n {
		t.Fatalf("Expire before any deadline ended %d sessions", n-got)
	}
	// Opened at i ms, due at 10 s + i ms: at 10.999 s, i < 1000 are due
	// unless touched or busy.
	now := 10*sec + 999*ms
	e.Expire(now)
	ended := 0
	for i := range n {
		_, open := e.SessionTTL(OwnerID(i + 1))
		due := i < 1000 && i%3 != 0 && i%7 != 0
		if open == due {
			t.Fatalf("session %d open=%v at %d; due=%v", i+1, open, now, due)
		}
		if due {
			ended++
		}
	}
	if got := e.Sessions(); got != n-ended {
		t.Fatalf("Sessions = %d; want %d", got, n-ended)
	}
	if got := e.NextDeadline(); got <= now {
		t.Fatalf("NextDeadline = %d, not after %d, with nothing due", got, now)
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestSessionTouchOutOfOrder: requests that end with clock readings out
// of order (a little, or a lot) still expire each session at its own
// deadline, whether it lands on the list or falls back to the heap.
func TestSessionTouchOutOfOrder(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.Shards = 1 })
	const n = 3 * listWalkMax
	ttl := 10 * time.Second
	// Owner o ends its request at 100+o s, except: 1 at 50 s (far behind
	// the tail: the heap), 2 at 140 s (a few places back: the list), and
	// 3 with another TTL (the heap).
	end := func(o OwnerID) int64 {
		switch o {
		case 1:
			return 50 * sec
		case 2:
			return 140 * sec
		}
		return (100 + int64(o)) * sec
	}
	for o := OwnerID(1); o <= n; o++ {
		st := ttl
		if o == 3 {
			st = 2 * ttl
		}
		if err := e.OpenSession(0, o, st); err != nil {
			t.Fatal(err)
		}
		e.BeginSession(0, o)
	}
	for o := OwnerID(4); o <= n; o++ {
		e.EndSession(end(o), o)
	}
	for _, o := range []OwnerID{1, 2, 3} {
		e.EndSession(end(o), o)
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if m := e.sess.m; m[1].hidx < 0 || !m[2].listed || m[3].hidx < 0 {
		t.Fatalf("filed: 1 in heap %v, 2 listed %v, 3 in heap %v; want all true", m[1].hidx >= 0, m[2].listed, m[3].hidx >= 0)
	}
	deadline := func(o OwnerID) int64 {
		if o == 3 {
			return end(o) + int64(2*ttl)
		}
		return end(o) + int64(ttl)
	}
	for now := 55 * sec; now <= 160*sec; now += sec {
		e.Expire(now)
		for o := OwnerID(1); o <= n; o++ {
			if _, open := e.SessionTTL(o); open != (deadline(o) > now) {
				t.Fatalf("at %ds session %d open=%v; its deadline is %ds", now/sec, o, open, deadline(o)/sec)
			}
		}
		if err := e.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSessionExpiryOrder: sessions due at one instant are dropped in
// owner order, so the grants their drops make do not depend on the heap.
func TestSessionExpiryOrder(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	for _, o := range []OwnerID{9, 3} {
		if err := e.OpenSession(0, o, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	mustGrant(t, e, 0, AcquireReq{Key: []byte("x"), Owner: 9, Limit: 1})
	mustGrant(t, e, 0, AcquireReq{Key: []byte("y"), Owner: 3, Limit: 1})
	for _, w := range []struct {
		owner OwnerID
		key   string
	}{{100, "x"}, {101, "y"}} {
		req := AcquireReq{Key: []byte(w.key), Owner: w.owner, Limit: 1, Timeout: time.Hour}
		if out, err := e.Acquire(0, req, rec.sink(w.owner, w.key)); err != nil || out.Result != Queued {
			t.Fatalf("Acquire(%d) = %v, %v; want queued", w.owner, out.Result, err)
		}
	}
	e.Expire(sec)
	got := rec.take()
	if len(got) != 2 || got[0].owner != 101 || got[1].owner != 100 || got[0].out.Token.Fence >= got[1].out.Token.Fence {
		t.Fatalf("heard %v; want 101 granted y (session 3 dropped first), then 100 granted x", got)
	}
}

// TestSessionExpiryBudget: a mass expiry is spread over Expire calls, and
// NextDeadline says when work is left.
func TestSessionExpiryBudget(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.Shards = 1 })
	n := sessionExpireBudget + 10
	for i := range n {
		if err := e.OpenSession(0, OwnerID(i+1), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	e.Expire(sec)
	if got := e.Sessions(); got != 10 {
		t.Fatalf("after one Expire %d sessions left; want 10", got)
	}
	if got := e.NextDeadline(); got > sec {
		t.Fatalf("NextDeadline = %d with due sessions left; want <= %d", got, sec)
	}
	e.Expire(sec)
	if got := e.Sessions(); got != 0 {
		t.Fatalf("after two Expires %d sessions left; want 0", got)
	}
}

func TestOpenSessionMax(t *testing.T) {
	e := newTestEngine(t, nil)
	for o := OwnerID(1); o <= 2; o++ {
		if err := e.OpenSessionMax(0, o, time.Second, 2); err != nil {
			t.Fatalf("OpenSessionMax(%d) = %v", o, err)
		}
	}
	if err := e.OpenSessionMax(0, 3, time.Second, 2); !errors.Is(err, ErrMaxSessions) {
		t.Fatalf("third session = %v; want ErrMaxSessions", err)
	}
	if err := e.OpenSessionMax(0, 2, time.Minute, 2); err != nil {
		t.Fatalf("reopening at the cap = %v; want nil", err)
	}
	if err := e.OpenSessionMax(0, 3, time.Second, -1); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("negative cap = %v; want ErrBadRequest", err)
	}
	e.CloseSession(0, 1)
	if err := e.OpenSessionMax(0, 3, time.Second, 2); err != nil {
		t.Fatalf("after a close = %v; want nil", err)
	}
	// Expiry frees a slot too.
	e.Expire(sec)
	if err := e.OpenSessionMax(sec, 4, time.Second, 2); err != nil {
		t.Fatalf("after expiry = %v; want nil", err)
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestReopenBusySession: reopening a session with a request in flight
// keeps that request counted, so its EndSession restarts the idle TTL
// instead of leaving the session busy (or negative) for ever.
func TestReopenBusySession(t *testing.T) {
	e := newTestEngine(t, nil)
	if err := e.OpenSession(0, 1, time.Second); err != nil {
		t.Fatal(err)
	}
	e.BeginSession(0, 1)
	if err := e.OpenSession(0, 1, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	e.Expire(10 * sec)
	if _, ok := e.SessionTTL(1); !ok {
		t.Fatal("busy reopened session expired")
	}
	e.EndSession(10*sec, 1)
	e.EndSession(10*sec, 1) // one too many: ignored
	e.Expire(12 * sec)
	if _, ok := e.SessionTTL(1); ok {
		t.Fatal("session outlived its TTL after its request ended")
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSessions measures the session paths with 100k open sessions:
// a request's BeginSession+EndSession, and Expire when one session is
// due (with the DropOwner it costs) or none is.
func BenchmarkSessions(b *testing.B) {
	const n = 100_000
	open := func(b *testing.B) *Engine {
		e := newTestEngine(b, nil)
		for i := range n {
			if err := e.OpenSession(int64(i), OwnerID(i+1), time.Minute); err != nil {
				b.Fatal(err)
			}
		}
		return e
	}
	b.Run("touch", func(b *testing.B) {
		e := open(b)
		now, i := int64(n), 0
		b.ReportAllocs()
		for b.Loop() {
			now++
			o := OwnerID(i%n + 1)
			i += 7919 // a prime: visit owners out of order
			if !e.BeginSession(now, o) {
				b.Fatal("session gone")
			}
			e.EndSession(now, o)
		}
	})
	b.Run("expire_one", func(b *testing.B) {
		e := open(b)
		ttl := int64(time.Minute)
		now, next := int64(n), OwnerID(n+1)
		b.ReportAllocs()
		for b.Loop() {
			// Steady state: one session opens and the oldest one ends.
			if err := e.OpenSession(now, next, time.Minute); err != nil {
				b.Fatal(err)
			}
			next++
			e.Expire(now - int64(n) + ttl)
			now++
		}
	})
	b.Run("expire_none", func(b *testing.B) {
		e := open(b)
		b.ReportAllocs()
		for b.Loop() {
			e.Expire(sec)
		}
	})
}

// TestIdleSessions: every busy session goes idle with its TTL restarted at
// now (an idle one keeps its own clock), and then expires on time.
func TestIdleSessions(t *testing.T) {
	e := newTestEngine(t, nil)
	ttl := 10 * time.Second
	for o := OwnerID(1); o <= 3; o++ {
		if err := e.OpenSession(0, o, ttl); err != nil {
			t.Fatal(err)
		}
	}
	e.BeginSession(sec, 1)
	e.BeginSession(sec, 2)
	e.BeginSession(sec, 2) // two requests in flight
	if n := e.IdleSessions(20 * sec); n != 2 {
		t.Fatalf("IdleSessions = %d; want 2", n)
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	e.Expire(15 * sec) // session 3, idle since 0, is due; 1 and 2 run from 20 s
	for o, want := range map[OwnerID]bool{1: true, 2: true, 3: false} {
		if _, ok := e.SessionTTL(o); ok != want {
			t.Fatalf("at 15 s session %d open = %v; want %v", o, ok, want)
		}
	}
	e.Expire(31 * sec)
	if n := e.Sessions(); n != 0 {
		t.Fatalf("%d sessions left at 31 s; want 0", n)
	}
	if e.IdleSessions(40*sec) != 0 {
		t.Fatal("IdleSessions found busy sessions in an empty engine")
	}
}

// TestIdleSessionsCoverWaits: a busy session whose owner waits keeps its
// TTL from the wait's deadline, so a request parked on a deposed leader is
// still alive when its wait is decided.
func TestIdleSessionsCoverWaits(t *testing.T) {
	e := newTestEngine(t, nil)
	ttl := 10 * time.Second
	const holder, waiter = OwnerID(1), OwnerID(2)
	if _, err := e.Acquire(0, AcquireReq{Key: []byte("k"), Owner: holder, Limit: 1, TTL: time.Minute}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.OpenSession(0, waiter, ttl); err != nil {
		t.Fatal(err)
	}
	e.BeginSession(sec, waiter)
	out, err := e.Acquire(sec, AcquireReq{Key: []byte("k"), Owner: waiter, Limit: 1, TTL: time.Minute, Timeout: 30 * time.Second}, countSinkFor())
	if err != nil || out.Result != Queued {
		t.Fatalf("parked acquire = %v, %v", out.Result, err)
	}
	if n := e.IdleSessions(5 * sec); n != 1 {
		t.Fatalf("IdleSessions = %d; want 1", n)
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	e.Expire(30 * sec) // the wait (until 31 s) is still open: so is the session
	if _, ok := e.SessionTTL(waiter); !ok {
		t.Fatal("the session expired under its owner's open wait")
	}
	e.Expire(40 * sec) // the wait timed out at 31 s; the session runs to 41 s
	if _, ok := e.SessionTTL(waiter); !ok {
		t.Fatal("the session expired before a TTL after its wait's deadline")
	}
	e.Expire(42 * sec)
	if _, ok := e.SessionTTL(waiter); ok {
		t.Fatal("the session outlived a TTL after its wait's deadline")
	}
}

func countSinkFor() Sink { return &countSink{} }
