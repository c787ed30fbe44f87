package replica

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// TestDedupRetries: a command retried with its request id is applied once
// and answered as the first was; a retried acquire from a new owner (the
// client's new connection) takes over the grant, and a retried parked one
// takes over the place in the queue, FIFO kept.
func TestDedupRetries(t *testing.T) {
	f := newTestFSM(t, 1)
	idx := uint64(0)
	apply := func(c Command) Reply {
		idx++
		return fsmApply(t, f, idx, c)
	}
	acq := func(owner engine.OwnerID, id string, timeout time.Duration) Command {
		return Command{Op: OpAcquire, Now: sec, Owner: owner, Key: []byte("k"), Limit: 1, TTL: 30 * time.Second,
			Timeout: timeout, Salt: uint64(owner), ReqKey: []byte(id)}
	}
	first := apply(acq(1, "a.1", 0))
	if first.Err != nil || first.Outcome.Result != engine.Granted {
		t.Fatalf("first acquire = %+v", first)
	}
	again := apply(acq(11, "a.1", 0)) // the same request from owner 1's new connection
	if again.Err != nil || again.Outcome != first.Outcome {
		t.Fatalf("retried acquire = %+v; want the first answer %+v", again, first)
	}
	if f.Engine().LastFence() != first.Outcome.Token.Fence {
		t.Fatalf("the retry made a grant: last fence %d, first grant's %d", f.Engine().LastFence(), first.Outcome.Token.Fence)
	}
	// Owners 2 and 3 queue; 2's connection dies; its retry as 12 keeps the
	// first place.
	if r := apply(acq(2, "b.1", time.Minute)); r.Outcome.Result != engine.Queued {
		t.Fatalf("acquire of 2 = %+v; want queued", r)
	}
	if r := apply(acq(3, "c.1", time.Minute)); r.Outcome.Result != engine.Queued {
		t.Fatalf("acquire of 3 = %+v; want queued", r)
	}
	if r := apply(acq(12, "b.1", time.Minute)); r.Outcome.Result != engine.Queued {
		t.Fatalf("retried acquire of 2 = %+v; want queued", r)
	}
	apply(Command{Op: OpDisconnect, Now: 2 * sec, Owner: 1, Release: true}) // owner 1's old connection: nothing left
	apply(Command{Op: OpDisconnect, Now: 2 * sec, Owner: 2, Release: true})
	rel := Command{Op: OpRelease, Now: 3 * sec, Key: []byte("k"), Token: first.Outcome.Token, ReqKey: []byte("a.2")}
	if r := apply(rel); r.Err != nil {
		t.Fatalf("release of the reclaimed grant: %v", r.Err)
	}
	if r := apply(rel); r.Err != nil {
		t.Fatalf("retried release = %v; want the first answer, ok", r.Err)
	}
	l, ok := lockHolderE(f.Engine(), "k", 3*sec)
	if !ok || l.OwnerConnID != 12 {
		t.Fatalf("after the release the holder is %+v, %v; want owner 12 (2's place kept)", l, ok)
	}
	// A request id reused for another op is refused.
	if r := apply(Command{Op: OpRelease, Now: 3 * sec, Key: []byte("k"), Token: first.Outcome.Token, ReqKey: []byte("b.1")}); !errors.Is(r.Err, engine.ErrBadRequest) {
		t.Fatalf("reused id = %v; want ErrBadRequest", r.Err)
	}
	// A retry whose grant is gone is applied as new.
	apply(Command{Op: OpDisconnect, Now: 4 * sec, Owner: 12, Release: true})
	apply(Command{Op: OpDisconnect, Now: 4 * sec, Owner: 3, Release: true})
	if r := apply(acq(22, "b.1", 0)); r.Err != nil || r.Outcome.Result != engine.Granted || r.Outcome.Token.Fence <= first.Outcome.Token.Fence {
		t.Fatalf("retry after its grant was released = %+v; want a new grant", r)
	}
}

// TestDedupWindow: the window keeps the latest DedupWindow ids, evicting
// the oldest, and survives a snapshot byte for byte.
func TestDedupWindow(t *testing.T) {
	f := newTestFSM(t, 1)
	n := DedupWindow + 10
	for i := range n {
		c := Command{Op: OpRenew, Now: sec, Key: []byte("k"), TTL: time.Second, ReqKey: fmt.Appendf(nil, "r.%d", i)}
		fsmApply(t, f, uint64(i+1), c)
	}
	if got := len(f.dedup.m); got != DedupWindow {
		t.Fatalf("window holds %d ids; want %d", got, DedupWindow)
	}
	if f.dedup.m["r.9"] != nil || f.dedup.m["r.10"] == nil || f.dedup.m[fmt.Sprintf("r.%d", n-1)] == nil {
		t.Fatal("the window did not evict the oldest ids")
	}
	var snap bytes.Buffer
	if _, err := f.WriteState(&snap); err != nil {
		t.Fatal(err)
	}
	g := newTestFSM(t, 2)
	if err := g.Restore(snap.Bytes()); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	var again bytes.Buffer
	if _, err := g.WriteState(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap.Bytes(), again.Bytes()) {
		t.Fatal("a restored window writes another state")
	}
	// Both evict the same id next.
	for _, x := range []*FSM{f, g} {
		fsmApply(t, x, uint64(n+1), Command{Op: OpRenew, Now: sec, Key: []byte("k"), TTL: time.Second, ReqKey: []byte("new")})
		if x.dedup.m["r.10"] != nil || x.dedup.m["r.11"] == nil {
			t.Fatal("a restored window evicts another id")
		}
	}
	if r := fsmApply(t, g, uint64(n+2), Command{Op: OpRenew, Now: sec, Key: []byte("k"), TTL: time.Second, ReqKey: []byte("r.11")}); !errors.Is(r.Err, engine.ErrNotHolder) {
		t.Fatalf("a restored record answered %v; want ErrNotHolder", r.Err)
	}
	// A state without ids is written as before (version 1 here).
	h := newTestFSM(t, 3)
	var plain bytes.Buffer
	if _, err := h.WriteState(&plain); err != nil {
		t.Fatal(err)
	}
	if v := plain.Bytes()[len(snapMagic)]; v != snapVersion {
		t.Fatalf("a state without request ids has version %d; want %d", v, snapVersion)
	}
}

// TestDedupParkedSink: a parked acquire retried on the node that parked it
// moves its Sink to the retry: the first hears Canceled, the retry the
// grant.
func TestDedupParkedSink(t *testing.T) {
	f := newTestFSM(t, 7)
	hold := fsmApply(t, f, 1, Command{Op: OpAcquire, Now: sec, Owner: 1, Key: []byte("k"), Limit: 1, TTL: time.Minute, Salt: 1})
	s1, s2 := newChanSink(), newChanSink()
	f.register(2, s1)
	f.register(3, s2)
	c := Command{Op: OpAcquire, Now: sec, Origin: 7, ReqID: 2, Owner: 2, Key: []byte("k"), Limit: 1, TTL: time.Minute,
		Timeout: time.Minute, Salt: 2, ReqKey: []byte("x")}
	if r := fsmApply(t, f, 2, c); r.Outcome.Result != engine.Queued {
		t.Fatalf("acquire = %+v; want queued", r)
	}
	c.ReqID, c.Owner = 3, 12
	if r := fsmApply(t, f, 3, c); r.Outcome.Result != engine.Queued {
		t.Fatalf("retry = %+v; want queued", r)
	}
	if o := s1.wait(t, time.Second); o.Result != engine.Canceled {
		t.Fatalf("first sink heard %v; want canceled", o.Result)
	}
	fsmApply(t, f, 4, Command{Op: OpRelease, Now: 2 * sec, Key: []byte("k"), Token: hold.Outcome.Token})
	if o := s2.wait(t, time.Second); o.Result != engine.Granted {
		t.Fatalf("retry's sink heard %v; want granted", o.Result)
	}
}
