package replica

import (
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// TestDedupSetRetries: an ml retried with its request id from a new
// connection is applied once: a granted set is taken over with its
// tokens (no new fence), a waiting set is taken over in its place in the
// queues (one wait, never two, still ahead of those that queued after
// it), a try that timed out answers timeout.
func TestDedupSetRetries(t *testing.T) {
	f := newTestFSM(t, 1)
	idx := uint64(0)
	apply := func(c Command) Reply {
		idx++
		return fsmApply(t, f, idx, c)
	}
	set := func(owner engine.OwnerID, id, keys string, timeout time.Duration) Command {
		return Command{Op: OpAcquireSet, Now: sec, Owner: owner, Key: []byte(keys), Limit: 1, TTL: 30 * time.Second,
			Timeout: timeout, Salt: uint64(owner), ReqKey: []byte(id)}
	}
	first := apply(set(1, "s.1", "a b", 0))
	if first.Err != nil || first.Set == nil || first.Set.Result != engine.Granted {
		t.Fatalf("first set = %+v", first)
	}
	fence := f.Engine().LastFence()
	again := apply(set(11, "s.1", "a b", 0)) // owner 1's new connection
	if again.Err != nil || again.Set == nil || again.Set.Result != engine.Granted ||
		again.Set.Tokens != first.Set.Tokens || again.Set.N != 2 {
		t.Fatalf("retried set = %+v; want the first grant %+v", again.Set, first.Set)
	}
	if f.Engine().LastFence() != fence {
		t.Fatalf("the retry made grants: last fence %d, was %d", f.Engine().LastFence(), fence)
	}
	for _, k := range []string{"a", "b"} {
		if l, ok := lockHolderE(f.Engine(), k, sec); !ok || l.OwnerConnID != 11 {
			t.Fatalf("holder of %s = %+v, %v; want owner 11 (taken over)", k, l, ok)
		}
	}
	// A try of a busy set timed out: its retry answers timeout, queues nothing.
	if r := apply(set(2, "s.2", "a c", 0)); r.Set == nil || r.Set.Result != engine.TimedOut {
		t.Fatalf("try of a busy set = %+v", r)
	}
	if r := apply(set(12, "s.2", "a c", 0)); r.Set == nil || r.Set.Result != engine.TimedOut {
		t.Fatalf("retried try = %+v; want timeout", r)
	}
	// A waiting set's retry takes its wait over: one set waits, the
	// retry's, ahead of owner 4's wait for b that queued after it.
	if r := apply(set(3, "s.3", "b c", time.Minute)); r.Set == nil || r.Set.Result != engine.Queued {
		t.Fatalf("set of 3 = %+v; want queued", r)
	}
	behind := Command{Op: OpAcquire, Now: sec, Owner: 4, Key: []byte("b"), Limit: 1, TTL: 30 * time.Second,
		Timeout: time.Minute, Salt: 4}
	if r := apply(behind); r.Outcome.Result != engine.Queued {
		t.Fatalf("owner 4's wait for b = %+v; want queued", r)
	}
	if r := apply(set(13, "s.3", "b c", time.Minute)); r.Set == nil || r.Set.Result != engine.Queued {
		t.Fatalf("retried set of 3 = %+v; want queued", r)
	}
	if l, _ := lockHolderE(f.Engine(), "b", sec); l.Waiters != 2 {
		t.Fatalf("b has %d waiters; want 2 (the retry's set and owner 4)", l.Waiters)
	}
	rel := Command{Op: OpRelease, Now: 2 * sec, Key: []byte("b"), Token: first.Set.Tokens[1]}
	if r := apply(rel); r.Err != nil {
		t.Fatalf("release of b: %v", r.Err)
	}
	for _, k := range []string{"b", "c"} {
		if l, ok := lockHolderE(f.Engine(), k, 2*sec); !ok || l.OwnerConnID != 13 {
			t.Fatalf("holder of %s = %+v, %v; want owner 13", k, l, ok)
		}
	}
	if got := f.Engine().LastFence(); got != fence+2 {
		t.Fatalf("last fence %d; want %d (one grant of the waiting set)", got, fence+2)
	}
	if r := apply(Command{Op: OpCancelWait, Now: 2 * sec, Key: []byte("b"), Owner: 4}); !r.OK {
		t.Fatalf("owner 4's wait for b was not still queued: %+v", r)
	}
	// Granted while it waited: a later retry takes the grant over.
	took := apply(set(21, "s.3", "b c", 0))
	if took.Set == nil || took.Set.Result != engine.Granted || f.Engine().LastFence() != fence+2 {
		t.Fatalf("retry of a set granted after waiting = %+v", took)
	}
	// A key of it released: the rest is given back, the retry applied as new.
	apply(Command{Op: OpRelease, Now: 3 * sec, Key: []byte("c"), Token: took.Set.Tokens[1]})
	r := apply(set(31, "s.3", "b c", 0))
	if r.Set == nil || r.Set.Result != engine.Granted || r.Set.Tokens[0].Fence <= took.Set.Tokens[1].Fence {
		t.Fatalf("retry after a key was released = %+v; want a new grant", r)
	}
	if l, ok := lockHolderE(f.Engine(), "b", 3*sec); !ok || l.OwnerConnID != 31 || l.Waiters != 0 {
		t.Fatalf("holder of b = %+v, %v; want owner 31 alone", l, ok)
	}
}
