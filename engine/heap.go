package engine

// heapItem is what an indexHeap orders: an entry (a lease or a parked
// wait; by deadline) or an idle REST session (by deadline, then owner).
// Each keeps its deadline and its index in the heap, -1 while out of it.
type heapItem interface{ *entry | *session }

// indexHeap is a min-heap of items that know their index, so a release,
// renewal or touch can remove or move one in O(log n). One implementation
// serves the shards' lease and wait deadlines (deadlines) and the REST
// sessions' idle deadlines (sessionHeap).
//
// The items are reached through the type switches of index, before and
// setDeadline rather than through methods of a type parameter: Go
// neither inlines one generic method into another nor calls a type
// parameter's methods directly: in cachegrind this costs 2-4% more
// instructions per op than two hand-written heaps, a method-based
// version up to 12%.
type indexHeap[E heapItem] []E

// deadlines is a shard's heap of entries, ordered by deadline.
type deadlines = indexHeap[*entry]

// sessionHeap is the heap of idle sessions, ordered by (deadline, owner).
type sessionHeap = indexHeap[*session]

// index returns where x keeps its heap index.
func index[E heapItem](x E) *int {
	if en, ok := any(x).(*entry); ok {
		return &en.hidx
	}
	return &any(x).(*session).hidx
}

// before reports whether a is due before b.
func before[E heapItem](a, b E) bool {
	if en, ok := any(a).(*entry); ok {
		return en.deadline < any(b).(*entry).deadline
	}
	return sessionBefore(any(a).(*session), any(b).(*session))
}

func setDeadline[E heapItem](x E, deadline int64) {
	if en, ok := any(x).(*entry); ok {
		en.deadline = deadline
		return
	}
	any(x).(*session).deadline = deadline
}

// set gives x a new deadline, adding it to the heap if it is not there.
func (h *indexHeap[E]) set(x E, deadline int64) {
	setDeadline(x, deadline)
	if i := *index(x); i >= 0 {
		h.fix(i)
		return
	}
	*h = append(*h, x)
	i := len(*h) - 1
	*index(x) = i
	h.up(i)
}

// remove takes x out of the heap.
func (h *indexHeap[E]) remove(x E) {
	hh := *h
	i := *index(x)
	last := len(hh) - 1
	if i != last {
		hh[i] = hh[last]
		*index(hh[i]) = i
	}
	var zero E
	hh[last] = zero
	*h = hh[:last]
	*index(x) = -1
	if c := cap(hh); c > shrinkFloor && last < c/4 {
		*h = append(make(indexHeap[E], 0, c/2), *h...) // give a burst's array back
	}
	if i != last {
		h.fix(i)
	}
}

// fix restores the order after the item at i changed its deadline.
func (h indexHeap[E]) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// up sifts the item at i up.
func (h indexHeap[E]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !before(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		*index(h[i]), *index(h[p]) = i, p
		i = p
	}
}

// down sifts the item at i down and reports whether it moved.
func (h indexHeap[E]) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && before(h[r], h[l]) {
			m = r
		}
		if !before(h[m], h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		*index(h[i]), *index(h[m]) = i, m
		i = m
	}
	return i > start
}
