package engine

// Read-write locks. A read-write key is a resource whose limit is rwLimit;
// its holders are either any number of readers (shared entries) or one
// writer. Its queue is strict FIFO: a request is granted only when nobody
// is queued before it, so a waiting writer stops later readers from
// overtaking it, and when a writer leaves, the readers at the head of the
// queue are granted together, up to the next writer. Every grant takes the
// next number of the engine's one fence counter, so a writer's fence is
// above every fence granted on the key before it.
//
// Leases, renewal, two-phase enqueue and wait, cancel, expiry and dropping
// an owner are the lock paths: only deciding who may be granted differs
// (rwFree here, promoteLocked for the queue).

// Mode is what an acquire asks for: a slot of a lock or semaphore, or a
// shared or exclusive hold of a read-write key.
type Mode uint8

// Modes. ModeSlot is the zero value: locks and semaphores.
const (
	ModeSlot  Mode = iota // a slot of a key with AcquireReq.Limit slots
	ModeRead              // shared: with other readers, never with a writer
	ModeWrite             // exclusive: alone
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case ModeSlot:
		return "slot"
	case ModeRead:
		return "read"
	case ModeWrite:
		return "write"
	}
	return "invalid"
}

// rwLimit is the limit a read-write key carries. No lock or semaphore has
// it (their limit is >= 1), so a key used one way and asked for the other
// is refused with ErrLimitMismatch while it is busy, as two semaphore
// limits are; and every slot path (holders.n < limit) grants nobody on it.
const rwLimit = 0

// RWLimit is the Limit KeyInfo and KeySummary report for a read-write key.
const RWLimit = rwLimit

// rwFree reports whether a read-write request of mode can be granted on r
// at once: nobody queued, and r free (a reader: or held by readers).
func (r *resource) rwFree(mode Mode) bool {
	if r.waiters.n != 0 {
		return false
	}
	return r.holders.n == 0 || mode == ModeRead && r.holders.head.shared
}

// writeHeld reports whether a writer holds r.
func (r *resource) writeHeld() bool {
	return r.holders.head != nil && !r.holders.head.shared
}

// consistent reports whether a restored key keeps its invariants.
func (r *resource) consistent() bool {
	if r.limit == rwLimit {
		return r.rwConsistent()
	}
	return r.holders.n <= r.limit && (r.holders.n == r.limit || r.waiters.n == 0)
}

// rwConsistent reports whether a restored read-write key keeps the
// invariants: one writer alone or only readers, and a queue whose head
// could not be granted now.
func (r *resource) rwConsistent() bool {
	readers := 0
	for en := r.holders.head; en != nil; en = en.qnext {
		if en.shared {
			readers++
		}
	}
	if readers != r.holders.n && r.holders.n != 1 {
		return false
	}
	head := r.waiters.head
	return head == nil || r.holders.n != 0 && !(head.shared && r.holders.head.shared)
}

// rwStat describes r, a read-write key in use, for Stats.
func (r *resource) rwStat() RWLockStat {
	st := RWLockStat{Key: r.key, Holders: r.holders.n, Waiters: r.waiters.n}
	switch {
	case r.writeHeld():
		st.Mode = "write"
	case r.holders.n > 0:
		st.Mode = "read"
	}
	for en := r.waiters.head; en != nil; en = en.qnext {
		if !en.shared {
			st.WritersWaiting++
		}
	}
	return st
}
