package engine

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"
)

// Holder is one holder of a key, as Inspect reports it. Owner and Fence
// are full 64-bit numbers: encoders for JSON should write them as
// strings (a float64 keeps only 53 bits).
type Holder struct {
	Owner           OwnerID
	Fence           uint64
	LeaseExpiresInS float64
	Shared          bool // a reader of a read-write key
}

// Waiter is one queued request on a key, in queue order. WaitExpiresInS
// is negative when the wait has no deadline (a two-phase enqueue not yet
// collected by a wait).
type Waiter struct {
	Owner          OwnerID
	WaitExpiresInS float64
	Shared         bool // a reader of a read-write key
}

// KeyInfo is one key's state: its limit (1 for a lock, RWLimit for a
// read-write key), its holders and
// its waiters in queue order. IdleS is how long it has been idle, 0 when
// it is not.
type KeyInfo struct {
	Key     string
	Limit   int
	Holders []Holder
	Waiters []Waiter
	IdleS   float64
	// HoldersTotal and WaitersTotal count every holder and waiter, also
	// those InspectMax left out of the lists.
	HoldersTotal int
	WaitersTotal int
}

// Inspect returns the state of key at now, or false when the engine has
// no such key (never used, or garbage-collected). It locks one shard for
// the time of copying that key's holders and waiters.
func (e *Engine) Inspect(now int64, key string) (KeyInfo, bool) {
	return e.InspectMax(now, key, -1)
}

// InspectMax is Inspect listing at most `most` holders and as many waiters
// (the first ones, in queue order; most < 0: all of them), so a key with
// 100,000 waiters costs a reader, and the shard lock, no more than that.
// The totals count them all.
func (e *Engine) InspectMax(now int64, key string, most int) (KeyInfo, bool) {
	s := e.shardFor([]byte(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.res[key]
	if !ok {
		return KeyInfo{}, false
	}
	nh, nw := r.holders.n, r.waiters.n
	if most >= 0 {
		nh, nw = min(nh, most), min(nw, most)
	}
	ki := KeyInfo{Key: r.key, Limit: r.limit, Holders: make([]Holder, 0, nh), Waiters: make([]Waiter, 0, nw),
		HoldersTotal: r.holders.n, WaitersTotal: r.waiters.n}
	for en := r.holders.head; en != nil && len(ki.Holders) < nh; en = en.qnext {
		ki.Holders = append(ki.Holders, Holder{Owner: en.owner, Fence: en.token.Fence,
			LeaseExpiresInS: seconds(en.deadline - now), Shared: en.shared})
	}
	for en := r.waiters.head; en != nil && len(ki.Waiters) < nw; en = en.qnext {
		w := Waiter{Owner: en.owner, WaitExpiresInS: -1, Shared: en.shared}
		if en.hidx >= 0 {
			w.WaitExpiresInS = max(0, seconds(en.deadline-now))
		}
		ki.Waiters = append(ki.Waiters, w)
	}
	if r.empty() {
		ki.IdleS = seconds(now - r.idleAt)
	}
	return ki, true
}

// KeySummary is one key in a TopKeys answer. Owner and LeaseExpiresInS
// are those of the first holder (the only one of a lock); Owner is 0 when
// nobody holds the key.
type KeySummary struct {
	Key             string
	Limit           int
	Holders         int
	Waiters         int
	Owner           OwnerID
	Fence           uint64
	LeaseExpiresInS float64
	Shared          bool // the first holder reads a read-write key
}

// TopKeys returns the busiest keys in use (held or waited for) whose
// name contains query (every one when query is ""), at most limit of
// them, in busyOrder, and how many keys matched. Idle keys are left out.
// It keeps only the limit best in a heap, so a dashboard can poll it with
// 100,000 keys without copying them all.
func (e *Engine) TopKeys(now int64, query string, limit int) ([]KeySummary, int) {
	if limit <= 0 {
		return []KeySummary{}, 0
	}
	h := &topHeap{}
	matched := 0
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		for _, r := range s.res {
			if r.empty() || (query != "" && !strings.Contains(r.key, query)) {
				continue
			}
			matched++
			ks := KeySummary{Key: r.key, Limit: r.limit, Holders: r.holders.n, Waiters: r.waiters.n}
			if h.Len() == limit && busyOrder(ks, (*h)[0]) >= 0 {
				continue
			}
			if en := r.holders.head; en != nil {
				ks.Owner, ks.Fence, ks.LeaseExpiresInS = en.owner, en.token.Fence, seconds(en.deadline-now)
				ks.Shared = en.shared
			}
			if h.Len() == limit {
				(*h)[0] = ks
				heap.Fix(h, 0)
			} else {
				heap.Push(h, ks)
			}
		}
		s.mu.Unlock()
	}
	slices.SortFunc(*h, busyOrder)
	return *h, matched
}

// busyOrder is TopKeys' order, busiest first: most waiters, then most
// holders, then by key.
func busyOrder(a, b KeySummary) int {
	return cmp.Or(cmp.Compare(b.Waiters, a.Waiters), cmp.Compare(b.Holders, a.Holders), strings.Compare(a.Key, b.Key))
}

// topHeap is a min-heap by TopKeys' order: its root is the least busy
// key kept, the one a busier key replaces.
type topHeap []KeySummary

func (h topHeap) Len() int           { return len(h) }
func (h topHeap) Less(i, j int) bool { return busyOrder(h[i], h[j]) > 0 }
func (h topHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *topHeap) Push(x any)        { *h = append(*h, x.(KeySummary)) }
func (h *topHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
