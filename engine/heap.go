package engine

// heapItem is what an indexHeap orders: a pointer to a value that keeps
// its own deadline and its index in the heap.
type heapItem[E any] interface {
	// before reports whether the receiver is due before o.
	before(o E) bool
	// setDeadline stores the deadline the heap orders by.
	setDeadline(deadline int64)
	// index returns the item's heap index: -1 while it is not in the heap.
	index() *int
}

// indexHeap is a min-heap of items that know their index, so a release,
// renewal or touch can remove or move one in O(log n). One implementation
// serves the shards' lease and wait deadlines (deadlines) and the REST
// sessions' idle deadlines (sessionHeap).
type indexHeap[E heapItem[E]] []E

// deadlines is a shard's heap of entries, ordered by deadline.
type deadlines = indexHeap[*entry]

// sessionHeap is the heap of idle sessions, ordered by (deadline, owner).
type sessionHeap = indexHeap[*session]

func (en *entry) before(o *entry) bool    { return en.deadline < o.deadline }
func (en *entry) setDeadline(d int64)     { en.deadline = d }
func (en *entry) index() *int             { return &en.hidx }
func (s *session) before(o *session) bool { return sessionBefore(s, o) }
func (s *session) setDeadline(d int64)    { s.deadline = d }
func (s *session) index() *int            { return &s.hidx }

func (h *indexHeap[E]) push(x E) {
	*x.index() = len(*h)
	*h = append(*h, x)
	h.up(len(*h) - 1)
}

// remove takes x out of the heap.
func (h *indexHeap[E]) remove(x E) {
	i := *x.index()
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero E
	(*h)[last] = zero
	*h = (*h)[:last]
	*x.index() = -1
	if c := cap(*h); c > shrinkFloor && last < c/4 {
		*h = append(make(indexHeap[E], 0, c/2), *h...) // give a burst's array back
	}
	if i != last {
		h.fix(i)
	}
}

// set gives x a new deadline, adding it to the heap if it is not there.
func (h *indexHeap[E]) set(x E, deadline int64) {
	x.setDeadline(deadline)
	if i := *x.index(); i >= 0 {
		h.fix(i)
		return
	}
	h.push(x)
}

func (h indexHeap[E]) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h indexHeap[E]) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	*h[i].index() = i
	*h[j].index() = j
}

func (h indexHeap[E]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h indexHeap[E]) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].before(h[l]) {
			m = r
		}
		if !h[m].before(h[i]) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}
