package engine

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// dumpState renders the engine's whole state as text: the fence counter
// and key count, then every shard in order with its resources sorted by
// key, each resource's holders and waiters in list order (owner, token,
// deadline, TTL, flags), its idle mark, and the open sessions sorted by
// owner. Two engines in the same state dump the same text.
func (e *Engine) dumpState() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fence=%d keys=%d\n", e.fence.Load(), e.keys.Load())
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		keys := make([]string, 0, len(s.res))
		for k := range s.res {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			r := s.res[k]
			fmt.Fprintf(&b, "shard %d key %q limit=%d idle=%v", i, k, r.limit, r.idle)
			if r.idle {
				fmt.Fprintf(&b, "@%d", r.idleAt)
			}
			b.WriteString("\n  holders:")
			for en := r.holders.head; en != nil; en = en.qnext {
				dumpEntry(&b, en)
			}
			b.WriteString("\n  waiters:")
			for en := r.waiters.head; en != nil; en = en.qnext {
				dumpEntry(&b, en)
			}
			b.WriteByte('\n')
		}
		// The idle list's order decides GC and eviction order.
		b.WriteString("  idle list:")
		for r := s.idle.head; r != nil; r = r.inext {
			fmt.Fprintf(&b, " %q", r.key)
		}
		fmt.Fprintf(&b, "\n  heap=%d next=%d\n", len(s.heap), s.next.Load())
		s.mu.Unlock()
	}
	e.sess.mu.Lock()
	ids := make([]OwnerID, 0, len(e.sess.m))
	for id := range e.sess.m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ss := e.sess.m[id]
		fmt.Fprintf(&b, "session %d ttl=%v last=%d busy=%d key=%x\n", id, ss.ttl, ss.lastSeen, ss.busy, ss.key)
	}
	e.sess.mu.Unlock()
	return b.String()
}

func dumpEntry(b *strings.Builder, en *entry) {
	fmt.Fprintf(b, " [o%d %s dl=%d ttl=%v", en.owner, en.token, en.deadline, en.ttl)
	if en.twoPhase {
		b.WriteString(" 2p")
	}
	if en.shared {
		b.WriteString(" sh")
	}
	if en.sink != nil {
		b.WriteString(" parked")
	}
	b.WriteByte(']')
}

// keyState summarises one key for scenario tests: "gone" when the engine
// does not hold it, "idle" when nobody holds or waits, and otherwise
// "h=<owners> w=<owners>" in list order (either part left out when empty).
func (e *Engine) keyState(key string) string {
	s := e.shardFor([]byte(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.res[key]
	switch {
	case r == nil:
		return "gone"
	case r.empty():
		return "idle"
	}
	var parts []string
	if r.holders.n > 0 {
		parts = append(parts, "h="+ownerList(r.holders.head))
	}
	if r.waiters.n > 0 {
		parts = append(parts, "w="+ownerList(r.waiters.head))
	}
	return strings.Join(parts, " ")
}

func ownerList(en *entry) string {
	var ids []string
	for ; en != nil; en = en.qnext {
		ids = append(ids, strconv.FormatUint(uint64(en.owner), 10))
	}
	return strings.Join(ids, ",")
}

// deadlineOf returns the deadline of owner's entry on key, and false if it
// has none there.
func (e *Engine) deadlineOf(key string, owner OwnerID) (int64, bool) {
	s := e.shardFor([]byte(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.res[key]
	if r == nil {
		return 0, false
	}
	for _, q := range []*entry{r.holders.head, r.waiters.head} {
		for en := q; en != nil; en = en.qnext {
			if en.owner == owner {
				return en.deadline, true
			}
		}
	}
	return 0, false
}

// checkInvariants reports the first broken invariant of the engine's
// structures, or nil: holders within the limit, no waiter while a slot is
// free, list counts and links, heap order and indices, owner lists that
// hold exactly the entries on resources, idle marks, and the key count.
func (e *Engine) checkInvariants() error {
	keys := 0
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		err := s.checkLocked()
		keys += len(s.res)
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
	}
	if got := e.keys.Load(); got != int64(keys) {
		return fmt.Errorf("key counter %d, %d keys in shards", got, keys)
	}
	if max := e.cfg.MaxKeys; max > 0 && keys > max {
		return fmt.Errorf("%d keys over MaxKeys %d", keys, max)
	}
	return e.sess.check()
}

// check reports the first broken invariant of the sessions: exactly the
// idle ones are filed, once, at lastSeen+ttl; the list is linked, holds
// only listTTL sessions and is in (deadline, owner) order; the heap is in
// order; and next is the earliest deadline.
func (ss *sessions) check() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for id, s := range ss.m {
		switch {
		case s.owner != id:
			return fmt.Errorf("session %d filed under %d", s.owner, id)
		case s.busy < 0:
			return fmt.Errorf("session %d busy %d", id, s.busy)
		case s.listed && s.hidx >= 0:
			return fmt.Errorf("session %d both listed and in the heap", id)
		case (s.busy == 0) != (s.listed || s.hidx >= 0):
			return fmt.Errorf("session %d busy %d, listed %v, heap index %d", id, s.busy, s.listed, s.hidx)
		case s.busy == 0 && s.deadline != addSat(s.lastSeen, int64(s.ttl)):
			return fmt.Errorf("session %d deadline %d, last seen %d + ttl %v", id, s.deadline, s.lastSeen, s.ttl)
		}
	}
	var prev *session
	for s := ss.head; s != nil; s = s.next {
		switch {
		case !s.listed || s.prev != prev || ss.m[s.owner] != s:
			return fmt.Errorf("session list broken at %d", s.owner)
		case s.ttl != ss.listTTL:
			return fmt.Errorf("listed session %d has ttl %v, list %v", s.owner, s.ttl, ss.listTTL)
		case prev != nil && !sessionBefore(prev, s):
			return fmt.Errorf("session list order broken at %d", s.owner)
		}
		prev = s
	}
	if ss.tail != prev {
		return fmt.Errorf("session list tail broken")
	}
	for i, s := range ss.heap {
		if s.hidx != i || ss.m[s.owner] != s {
			return fmt.Errorf("session heap slot %d broken", i)
		}
		if i > 0 && sessionBefore(s, ss.heap[(i-1)/2]) {
			return fmt.Errorf("session heap order broken at %d", i)
		}
	}
	next := int64(math.MaxInt64)
	if s := ss.firstLocked(); s != nil {
		next = s.deadline
	}
	if got := ss.next.Load(); got != next {
		return fmt.Errorf("session next %d, earliest deadline %d", got, next)
	}
	return nil
}

func (s *shard) checkLocked() error {
	held, waiting := 0, 0
	for _, r := range s.res {
		held += r.holders.n
		waiting += r.waiters.n
	}
	if held != s.held || waiting != s.waiting {
		return fmt.Errorf("running counts held=%d waiting=%d, lists hold %d and %d", s.held, s.waiting, held, waiting)
	}
	onRes := make(map[*entry]bool)
	idle := make(map[*resource]bool)
	for r := s.idle.head; r != nil; r = r.inext {
		if r.inext != nil && r.inext.iprev != r {
			return fmt.Errorf("idle list link broken at %q", r.key)
		}
		if !r.idle || !r.empty() || s.res[r.key] != r {
			return fmt.Errorf("idle list holds %q (idle=%v empty=%v)", r.key, r.idle, r.empty())
		}
		idle[r] = true
	}
	for k, r := range s.res {
		if r.key != k || s.e.shardFor([]byte(k)) != s {
			return fmt.Errorf("key %q misplaced", k)
		}
		if r.limit == rwLimit && !r.rwConsistent() {
			return fmt.Errorf("%q: read-write holders or queue head break the rules", k)
		}
		if r.holders.n > r.limit && r.limit != rwLimit {
			return fmt.Errorf("%q: %d holders over limit %d", k, r.holders.n, r.limit)
		}
		if r.holders.n < r.limit && r.waiters.n > 0 {
			return fmt.Errorf("%q: %d waiters with a free slot", k, r.waiters.n)
		}
		if r.idle != r.empty() || idle[r] != r.idle {
			return fmt.Errorf("%q: idle=%v but empty=%v", k, r.idle, r.empty())
		}
		for _, q := range []*queue{&r.holders, &r.waiters} {
			n := 0
			var prev *entry
			for en := q.head; en != nil; en = en.qnext {
				n++
				if en.qprev != prev || en.res != r || en.holding != (q == &r.holders) {
					return fmt.Errorf("%q: queue entry of owner %d broken", k, en.owner)
				}
				if en.holding && en.hidx < 0 {
					return fmt.Errorf("%q: holder %d has no lease deadline", k, en.owner)
				}
				if !en.holding && (en.sink != nil) != (en.hidx >= 0) {
					return fmt.Errorf("%q: waiter %d parked=%v in heap=%v", k, en.owner, en.sink != nil, en.hidx >= 0)
				}
				onRes[en] = true
				prev = en
			}
			if n != q.n || q.tail != prev {
				return fmt.Errorf("%q: queue count %d, %d linked", k, q.n, n)
			}
		}
	}
	for i, en := range s.heap {
		if en.hidx != i || !onRes[en] {
			return fmt.Errorf("heap slot %d broken", i)
		}
		if i > 0 && s.heap[(i-1)/2].deadline > en.deadline {
			return fmt.Errorf("heap order broken at %d", i)
		}
	}
	owned := 0
	for id, head := range s.owners {
		if head == nil || head.oprev != nil {
			return fmt.Errorf("owner %d list head broken", id)
		}
		for en := head; en != nil; en = en.onext {
			if en.owner != id || !onRes[en] || (en.onext != nil && en.onext.oprev != en) {
				return fmt.Errorf("owner %d list broken", id)
			}
			owned++
		}
	}
	if owned != len(onRes) {
		return fmt.Errorf("%d entries on resources, %d on owner lists", len(onRes), owned)
	}
	return nil
}
