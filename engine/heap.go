package engine

// deadlines is a min-heap of entries ordered by deadline. Each entry keeps
// its index (hidx) so a release or renewal can remove or move it in
// O(log n); hidx is -1 while the entry is not in the heap.
type deadlines []*entry

func (h *deadlines) push(en *entry) {
	en.hidx = len(*h)
	*h = append(*h, en)
	h.up(en.hidx)
}

// remove takes en out of the heap.
func (h *deadlines) remove(en *entry) {
	i := en.hidx
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	en.hidx = -1
	if c := cap(*h); c > shrinkFloor && last < c/4 {
		*h = append(make(deadlines, 0, c/2), *h...) // give a burst's array back
	}
	if i != last {
		h.fix(i)
	}
}

// set gives en a new deadline, adding it to the heap if it is not there.
func (h *deadlines) set(en *entry, deadline int64) {
	en.deadline = deadline
	if en.hidx < 0 {
		h.push(en)
		return
	}
	h.fix(en.hidx)
}

func (h deadlines) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h deadlines) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx = i
	h[j].hidx = j
}

func (h deadlines) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].deadline <= h[i].deadline {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h deadlines) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].deadline < h[l].deadline {
			m = r
		}
		if h[i].deadline <= h[m].deadline {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}
