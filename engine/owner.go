package engine

import (
	"math"
	"sync"
)

// ownerStripes is the number of independently locked parts of the owner
// count table; a power of two.
const ownerStripes = 64

// ownerCounts tracks how many entries (holdings and waits, on any shard)
// each owner has, for Config.MaxKeysPerOwner. It is derived from the
// shards' entries alone, so two engines fed the same calls count alike and
// a restored engine counts it as it reads the owner lists. Its stripe
// locks are taken under a shard lock and take nothing themselves.
type ownerCounts struct {
	max     int // 0: no cap, and nothing is counted
	stripes [ownerStripes]ownerStripe
}

type ownerStripe struct {
	mu   sync.Mutex
	m    map[OwnerID]int32
	peak int      // most owners m held since it was last rebuilt
	_    [40]byte // keep neighbouring stripes' locks off one cache line
}

func (oc *ownerCounts) init(max int) {
	oc.max = max
	for i := range oc.stripes {
		oc.stripes[i].m = make(map[OwnerID]int32)
	}
}

func (oc *ownerCounts) stripe(owner OwnerID) *ownerStripe {
	// Owner IDs are often sequential: mix them so neighbours spread.
	h := uint64(owner) * 0x9E3779B97F4A7C15
	return &oc.stripes[h>>(64-6)]
}

// tryAdd counts a new entry of owner and reports true, or reports false
// when owner already has max entries.
func (oc *ownerCounts) tryAdd(owner OwnerID) bool { return oc.addBelow(owner, oc.max) }

// add counts an entry of owner without checking the cap (a lease that
// moves to owner on renewal).
func (oc *ownerCounts) add(owner OwnerID) { oc.addBelow(owner, math.MaxInt) }

// addBelow counts an entry of owner unless it has limit already.
func (oc *ownerCounts) addBelow(owner OwnerID, limit int) bool {
	if oc.max == 0 {
		return true
	}
	st := oc.stripe(owner)
	st.mu.Lock()
	n := st.m[owner]
	ok := int(n) < limit
	if ok {
		st.m[owner] = n + 1
		st.peak = max(st.peak, len(st.m))
	}
	st.mu.Unlock()
	return ok
}

// full reports whether owner has max entries (false when nothing is
// counted).
func (oc *ownerCounts) full(owner OwnerID) bool {
	return oc.max > 0 && oc.count(owner) >= oc.max
}

// done uncounts an entry of owner that left the engine (or moved away).
func (oc *ownerCounts) done(owner OwnerID) {
	if oc.max == 0 {
		return
	}
	st := oc.stripe(owner)
	st.mu.Lock()
	if n := st.m[owner] - 1; n > 0 {
		st.m[owner] = n
	} else {
		delete(st.m, owner)
		// Maps never shrink: one rebuilt after a flood of owners gives
		// its buckets back (see shrinkFloor).
		if st.peak > shrinkFloor && len(st.m) < st.peak/4 {
			st.m = rebuilt(st.m)
			st.peak = len(st.m)
		}
	}
	st.mu.Unlock()
}

// count returns owner's entries (0 when nothing is counted).
func (oc *ownerCounts) count(owner OwnerID) int {
	st := oc.stripe(owner)
	st.mu.Lock()
	defer st.mu.Unlock()
	return int(st.m[owner])
}
