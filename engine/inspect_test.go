package engine

import (
	"fmt"
	"testing"
	"time"
)

func TestInspectHoldersAndWaiters(t *testing.T) {
	e := newTestEngine(t, nil)
	if _, ok := e.Inspect(0, "k"); ok {
		t.Fatal("Inspect found a key never used")
	}
	first, err := e.Acquire(0, AcquireReq{Key: []byte("k"), Owner: 1 << 60, Limit: 1, TTL: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	for _, o := range []OwnerID{2, 3} {
		if _, err := e.Acquire(0, AcquireReq{Key: []byte("k"), Owner: o, Limit: 1, TTL: time.Second, Timeout: 5 * time.Second}, rec.sink(o, "k")); err != nil {
			t.Fatal(err)
		}
	}
	ki, ok := e.Inspect(sec, "k")
	if !ok {
		t.Fatal("Inspect did not find a held key")
	}
	if ki.Limit != 1 || len(ki.Holders) != 1 || len(ki.Waiters) != 2 || ki.IdleS != 0 {
		t.Fatalf("Inspect = %+v", ki)
	}
	h := ki.Holders[0]
	if h.Owner != 1<<60 || h.Fence != first.Token.Fence || h.LeaseExpiresInS != 9 {
		t.Fatalf("holder = %+v, want owner 1<<60, fence %d, 9s left", h, first.Token.Fence)
	}
	if ki.Waiters[0].Owner != 2 || ki.Waiters[1].Owner != 3 || ki.Waiters[0].WaitExpiresInS != 4 {
		t.Fatalf("waiters = %+v, want owners 2 then 3, 4s left", ki.Waiters)
	}
	if err := e.Release(sec, []byte("k"), first.Token); err != nil {
		t.Fatal(err)
	}
	ki, _ = e.Inspect(sec, "k")
	if len(ki.Holders) != 1 || ki.Holders[0].Owner != 2 || len(ki.Waiters) != 1 {
		t.Fatalf("after release: %+v", ki)
	}
}

func TestTopKeysOrderSearchAndLimit(t *testing.T) {
	e := newTestEngine(t, nil)
	owner := OwnerID(0)
	acquire := func(key string, limit, n int) {
		for range n {
			owner++
			if _, err := e.Acquire(0, AcquireReq{Key: []byte(key), Owner: owner, Limit: limit, TTL: time.Hour, Timeout: time.Hour}, nopSink{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	acquire("job/a", 1, 1) // held, no waiter
	acquire("job/b", 1, 3) // held, 2 waiters
	acquire("sem/c", 4, 3) // 3 holders
	acquire("job/d", 1, 2) // held, 1 waiter
	for i := range 50 {
		acquire(fmt.Sprintf("other/%02d", i), 1, 1)
	}
	if _, err := e.Enqueue(0, AcquireReq{Key: []byte("job/idle"), Owner: 999, Limit: 1, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	e.DropOwner(0, 999) // job/idle is now idle: left out
	got, matched := e.TopKeys(0, "", 3)
	if matched != 54 || len(got) != 3 {
		t.Fatalf("TopKeys all: %d matched, %d returned", matched, len(got))
	}
	if got[0].Key != "job/b" || got[1].Key != "job/d" || got[2].Key != "sem/c" {
		t.Fatalf("TopKeys order = %s %s %s, want job/b job/d sem/c", got[0].Key, got[1].Key, got[2].Key)
	}
	if got[0].Waiters != 2 || got[0].Holders != 1 || got[0].Owner == 0 || got[0].Fence == 0 || got[2].Holders != 3 || got[2].Limit != 4 {
		t.Fatalf("TopKeys summaries = %+v", got)
	}
	got, matched = e.TopKeys(0, "job/", 10)
	if matched != 3 || len(got) != 3 || got[2].Key != "job/a" {
		t.Fatalf("TopKeys search = %d matched, %+v", matched, got)
	}
	got, matched = e.TopKeys(0, "other/", 5)
	if matched != 50 || len(got) != 5 || got[0].Key != "other/00" || got[4].Key != "other/04" {
		t.Fatalf("TopKeys ties by key = %d matched, %+v", matched, got)
	}
}

// BenchmarkTopKeys is one dashboard poll over statsKeys keys.
func BenchmarkTopKeys(b *testing.B) {
	e := newStatsEngine(b)
	b.ReportAllocs()
	for b.Loop() {
		if got, _ := e.TopKeys(0, "", 50); len(got) != 50 {
			b.Fatal(len(got))
		}
	}
}
