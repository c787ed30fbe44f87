package engine

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestOwnerCannotTakeEveryKey: without a per-owner cap, one owner
// enqueueing on 1,024 distinct keys used up the default MaxKeys, and every
// other owner was refused any new key.
func TestOwnerCannotTakeEveryKey(t *testing.T) {
	e := newTestEngine(t, nil)
	max := e.Config().MaxKeysPerOwner
	refused := 0
	for i := range e.Config().MaxKeys {
		_, err := e.Enqueue(0, AcquireReq{Key: fmt.Appendf(nil, "k%d", i), Owner: 1, Limit: 1})
		switch {
		case err == nil:
		case errors.Is(err, ErrOwnerMaxKeys) && errors.Is(err, ErrMaxKeys):
			refused++
		default:
			t.Fatalf("enqueue %d: %v", i, err)
		}
	}
	if got := e.Config().MaxKeys - refused; max == 0 || got != max {
		t.Fatalf("owner 1 took %d keys, want the cap %d", got, max)
	}
	if out, err := e.Acquire(0, AcquireReq{Key: []byte("bystander"), Owner: 2, Limit: 1}, nil); err != nil || out.Result != Granted {
		t.Fatalf("bystander: %v %v, want granted", out, err)
	}
	if n := e.OwnerRefusals(); n != uint64(refused) {
		t.Fatalf("OwnerRefusals = %d, want %d", n, refused)
	}
}

// TestOwnerCapCountsEveryEntry checks what the cap counts: holdings and
// waits on any shard, given back on release, timeout, cancel and drop;
// a lease moved by RenewAs; and a restored engine's recount.
func TestOwnerCapCountsEveryEntry(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.MaxKeysPerOwner = 3 })
	key := func(i int) []byte { return fmt.Appendf(nil, "k%d", i) }
	acq := func(owner OwnerID, i int, timeout time.Duration) (Outcome, error) {
		return e.Acquire(0, AcquireReq{Key: key(i), Owner: owner, Limit: 1, Timeout: timeout}, &countSink{})
	}
	// Owner 2 holds k0..k2, owner 1 holds k10 and waits on k0 and k1.
	for i := range 3 {
		if _, err := acq(2, i, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := acq(2, 3, 0); !errors.Is(err, ErrOwnerMaxKeys) {
		t.Fatalf("4th key of owner 2: %v, want ErrOwnerMaxKeys", err)
	}
	if _, g := e.Metrics(); g.Keys != 3 {
		t.Fatalf("%d keys after a refused new key, want 3: an owner at its cap made one", g.Keys)
	}
	held, _ := acq(1, 10, 0)
	for i := range 2 {
		if out, err := acq(1, i, time.Minute); err != nil || out.Result != Queued {
			t.Fatalf("wait %d: %v %v", i, out, err)
		}
	}
	if _, err := acq(1, 11, 0); !errors.Is(err, ErrOwnerMaxKeys) {
		t.Fatalf("waits not counted: %v", err)
	}
	// A try-lock on a busy key creates nothing, so it is answered even at the cap.
	if out, err := acq(1, 2, 0); err != nil || out.Result != TimedOut {
		t.Fatalf("try-lock at the cap: %v %v", out, err)
	}
	// A cancelled wait and a released lease give their place back.
	if !e.CancelWait(0, key(0), 1) {
		t.Fatal("cancel")
	}
	if _, err := acq(1, 11, 0); err != nil {
		t.Fatalf("after cancel: %v", err)
	}
	if err := e.Release(0, key(10), held.Token); err != nil {
		t.Fatal(err)
	}
	if got := e.own.count(1); got != 2 {
		t.Fatalf("owner 1 counts %d, want 2", got)
	}
	// Round trip through WriteState/ReadState: the counts are rebuilt.
	var buf bytes.Buffer
	if err := e.WriteState(&buf); err != nil {
		t.Fatal(err)
	}
	r := newTestEngine(t, func(c *Config) { c.MaxKeysPerOwner = 3 })
	if err := r.ReadState(&buf); err != nil {
		t.Fatal(err)
	}
	for _, ee := range []*Engine{e, r} {
		if a, b := ee.own.count(1), ee.own.count(2); a != 2 || b != 3 {
			t.Fatalf("counts %d, %d; want 2, 3", a, b)
		}
		ee.DropOwner(0, 2)
		ee.DropOwner(0, 1)
		if a, b := ee.own.count(1), ee.own.count(2); a != 0 || b != 0 {
			t.Fatalf("after drop: counts %d, %d; want 0, 0", a, b)
		}
		ee.Expire(int64(time.Hour))
	}
}

// TestOwnerCapRenewMoves checks that a lease renewed by another owner is
// counted for the new owner, and that the old one gets its place back.
func TestOwnerCapRenewMoves(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.MaxKeysPerOwner = 1 })
	out, err := e.Acquire(0, AcquireReq{Key: []byte("a"), Owner: 1, Limit: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.RenewAs(0, []byte("a"), out.Token, 0, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Acquire(0, AcquireReq{Key: []byte("b"), Owner: 1, Limit: 1}, nil); err != nil {
		t.Fatalf("owner 1 after its lease moved: %v", err)
	}
	if _, err := e.Acquire(0, AcquireReq{Key: []byte("c"), Owner: 2, Limit: 1}, nil); !errors.Is(err, ErrOwnerMaxKeys) {
		t.Fatalf("owner 2 with the moved lease: %v, want ErrOwnerMaxKeys", err)
	}
}
