package engine

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// delayEngine returns an engine whose lock-delay is d.
func delayEngine(tb testing.TB, d time.Duration) *Engine {
	return newTestEngine(tb, func(c *Config) { c.LockDelay = d })
}

// TestLockDelayAfterExpiry: a lease that runs out holds its slot back for
// the delay; the queued waiter is granted when it ends, with a higher fence.
func TestLockDelayAfterExpiry(t *testing.T) {
	e := delayEngine(t, 5*time.Second)
	var rec recorder
	key := []byte("k")
	first := mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: time.Second})
	if out, _ := e.Acquire(0, AcquireReq{Key: key, Owner: 2, Limit: 1, Timeout: time.Minute}, rec.sink(2, "k")); out.Result != Queued {
		t.Fatalf("waiter: %v", out.Result)
	}
	e.Expire(1 * sec)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("granted during the delay: %v", got)
	}
	if c, g := e.Metrics(); c.Delays != 1 || g.Delayed != 1 || c.Expiries != 1 {
		t.Fatalf("metrics %+v %+v", c, g)
	}
	if e.NextDeadline() != 6*sec {
		t.Fatalf("next deadline %d, want %d", e.NextDeadline(), 6*sec)
	}
	st := e.Snapshot(2 * sec)
	if len(st.Delayed) != 1 || st.Delayed[0].Key != "k" || st.Delayed[0].EndsInS != 4 || st.Delayed[0].Waiters != 1 || len(st.Locks) != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A try-lock by a third owner does not overtake the delay.
	if out, _ := e.Acquire(3*sec, AcquireReq{Key: key, Owner: 3, Limit: 1}, nil); out.Result != TimedOut {
		t.Fatalf("try-lock during the delay: %v", out.Result)
	}
	e.Expire(6*sec - 1)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("granted before the delay ended: %v", got)
	}
	w, _ := e.Watch("k", false)
	defer w.Close()
	e.Expire(6 * sec)
	var kinds []string
	for {
		ev, ok, _ := w.TryNext()
		if !ok {
			break
		}
		kinds = append(kinds, ev.Kind.String())
	}
	if strings.Join(kinds, " ") != "state synced delay_ended granted" {
		t.Fatalf("events as the delay ends: %v", kinds)
	}
	got := rec.take()
	if len(got) != 1 || got[0].owner != 2 || got[0].out.Result != Granted || got[0].out.Token.Fence <= first.Token.Fence {
		t.Fatalf("after the delay: %v", got)
	}
	if _, g := e.Metrics(); g.Delayed != 0 {
		t.Fatalf("delayed slots left: %d", g.Delayed)
	}
}

// TestLockDelayNotOnRelease: a release by token is voluntary.
func TestLockDelayNotOnRelease(t *testing.T) {
	e := delayEngine(t, 5*time.Second)
	key := []byte("k")
	first := mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Limit: 1})
	if err := e.Release(sec, key, first.Token); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, e, sec, AcquireReq{Key: key, Owner: 2, Limit: 1})
}

// TestLockDelayOnDisconnect: an owner that goes away loses involuntarily;
// waiters keep their order when the delay ends.
func TestLockDelayOnDisconnect(t *testing.T) {
	e := delayEngine(t, 2*time.Second)
	var rec recorder
	key := []byte("k")
	mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Limit: 1})
	for _, o := range []OwnerID{2, 3, 4} {
		e.Acquire(0, AcquireReq{Key: key, Owner: o, Limit: 1, Timeout: time.Minute}, rec.sink(o, "k"))
	}
	e.DropOwner(sec, 1)
	e.Expire(2 * sec)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("granted during the delay: %v", got)
	}
	e.Expire(3 * sec)
	got := rec.take()
	if len(got) != 1 || got[0].owner != 2 {
		t.Fatalf("after the delay: %v; want owner 2 first", got)
	}
	// Owner 2 now disconnects: 3 is next, after another delay.
	e.DropOwner(4*sec, 2)
	e.Expire(5 * sec)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("granted during the second delay: %v", got)
	}
	e.Expire(6 * sec)
	if got := rec.take(); len(got) != 1 || got[0].owner != 3 {
		t.Fatalf("after the second delay: %v; want owner 3", got)
	}
}

// TestLockDelayOverride: a request's own delay replaces the engine's, and
// a negative one means none.
func TestLockDelayOverride(t *testing.T) {
	e := delayEngine(t, 5*time.Second)
	key := []byte("k")
	mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: time.Second, LockDelay: -1})
	e.Expire(sec)
	mustGrant(t, e, sec, AcquireReq{Key: key, Owner: 2, Limit: 1, TTL: time.Second, LockDelay: 10 * time.Second})
	e.Expire(2 * sec)
	if out, _ := e.Acquire(11*sec, AcquireReq{Key: key, Owner: 3, Limit: 1}, nil); out.Result != TimedOut {
		t.Fatalf("during the 10 s delay: %v", out.Result)
	}
	e.Expire(12 * sec)
	mustGrant(t, e, 12*sec, AcquireReq{Key: key, Owner: 3, Limit: 1})

	// No engine delay, a request's own.
	e2 := delayEngine(t, 0)
	mustGrant(t, e2, 0, AcquireReq{Key: key, Owner: 1, Limit: 1, LockDelay: time.Second})
	e2.DropOwner(0, 1)
	if out, _ := e2.Acquire(0, AcquireReq{Key: key, Owner: 2, Limit: 1}, nil); out.Result != TimedOut {
		t.Fatalf("during the request's delay: %v", out.Result)
	}
}

// TestLockDelaySemaphore: only the lost slot is held back.
func TestLockDelaySemaphore(t *testing.T) {
	e := delayEngine(t, 5*time.Second)
	key := []byte("s")
	mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Limit: 2, TTL: time.Second})
	e.Expire(sec)
	mustGrant(t, e, sec, AcquireReq{Key: key, Owner: 2, Limit: 2})
	if out, _ := e.Acquire(sec, AcquireReq{Key: key, Owner: 3, Limit: 2}, nil); out.Result != TimedOut {
		t.Fatalf("third holder of a 2-slot semaphore with a held-back slot: %v", out.Result)
	}
}

// TestLockDelayState: the delay survives WriteState/ReadState and
// ShiftDeadlines, and a state without lock-delay is written as version 3.
func TestLockDelayState(t *testing.T) {
	e := delayEngine(t, 5*time.Second)
	key := []byte("k")
	var plain bytes.Buffer
	if err := e.WriteState(&plain); err != nil {
		t.Fatal(err)
	}
	if v := plain.Bytes()[len(stateMagic)]; v != setsVersion-1 {
		t.Fatalf("state without lock-delay written as version %d", v)
	}
	mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: time.Second})
	mustGrant(t, e, 0, AcquireReq{Key: []byte("o"), Owner: 1, Limit: 1, LockDelay: 7 * time.Second})
	e.Acquire(0, AcquireReq{Key: key, Owner: 2, Limit: 1, Timeout: time.Minute}, nil)
	e.Expire(sec)
	var buf bytes.Buffer
	if err := e.WriteState(&buf); err != nil {
		t.Fatal(err)
	}
	if v := buf.Bytes()[len(stateMagic)]; v != stateVersionDelays {
		t.Fatalf("state with lock-delay written as version %d", v)
	}
	r := delayEngine(t, 5*time.Second)
	if err := r.ReadState(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	r.WriteState(&again)
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("restored state writes different bytes")
	}
	r.ShiftDeadlines(10 * sec)
	r.Expire(15*sec + 1)
	if out, _ := r.Acquire(15*sec+1, AcquireReq{Key: key, Owner: 3, Limit: 1}, nil); out.Result != TimedOut {
		t.Fatal("delay ended before its shifted end")
	}
	r.Expire(16 * sec)
	if _, g := r.Metrics(); g.Delayed != 0 || g.Held != 2 {
		t.Fatalf("after the shifted delay: %+v", g)
	}
	// The override of the holder of "o" was restored.
	r.DropOwner(16*sec, 1)
	if out, _ := r.Acquire(22*sec, AcquireReq{Key: []byte("o"), Owner: 3, Limit: 1}, nil); out.Result != TimedOut {
		t.Fatal("restored override lost")
	}
}

// BenchmarkLockDelay is one lease lost to expiry, held back and handed
// to a waiter when the delay ends.
func BenchmarkLockDelay(b *testing.B) {
	e := delayEngine(b, time.Second)
	key := []byte("delay")
	sink := &countSink{}
	now := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		e.Acquire(now, AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: time.Second}, nil)
		e.Acquire(now, AcquireReq{Key: key, Owner: 2, Limit: 1, TTL: time.Second, Timeout: time.Minute}, sink)
		e.Expire(now + sec)
		e.Expire(now + 2*sec)
		e.Release(now+2*sec, key, sink.last.Token)
		now += 3 * sec
	}
}

// TestLockDelayReadWrite: a read-write key whose writer's lease ran out
// is held back for the delay; then the readers at the head of the queue
// are granted together.
func TestLockDelayReadWrite(t *testing.T) {
	e := delayEngine(t, 5*time.Second)
	var rec recorder
	key := []byte("rw")
	mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Mode: ModeWrite, TTL: time.Second})
	for _, o := range []OwnerID{2, 3} {
		e.Acquire(0, AcquireReq{Key: key, Owner: o, Mode: ModeRead, Timeout: time.Minute}, rec.sink(o, "rw"))
	}
	e.Expire(sec)
	if out, _ := e.Acquire(2*sec, AcquireReq{Key: key, Owner: 4, Mode: ModeRead}, nil); out.Result != TimedOut {
		t.Fatalf("reader during the delay: %v", out.Result)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("granted during the delay: %v", got)
	}
	e.Expire(6 * sec)
	if got := rec.take(); len(got) != 2 || got[0].owner != 2 || got[1].owner != 3 {
		t.Fatalf("after the delay: %v; want both readers", got)
	}
}

// TestLockDelaySet: a set of keys waits out a lock-delay on any of them,
// and is granted, all at once, when it ends.
func TestLockDelaySet(t *testing.T) {
	e := delayEngine(t, 5*time.Second)
	mustGrant(t, e, 0, AcquireReq{Key: []byte("a"), Owner: 1, Limit: 1, TTL: time.Second})
	e.Expire(sec)
	if out, _ := e.AcquireSet(sec, setReq(2, 0, "a", "b"), nil); out.Result != TimedOut {
		t.Fatalf("set try-lock during the delay: %v", out.Result)
	}
	var sr setRec
	if out, _ := e.AcquireSet(sec, setReq(2, time.Minute, "a", "b"), &sr); out.Result != Queued {
		t.Fatalf("set during the delay: %v", out.Result)
	}
	e.Expire(5 * sec)
	if got := sr.take(); len(got) != 0 {
		t.Fatalf("set granted during the delay: %v", got)
	}
	e.Expire(6 * sec)
	if got := sr.take(); len(got) != 1 || got[0].Result != Granted {
		t.Fatalf("set after the delay: %v", got)
	}
}
