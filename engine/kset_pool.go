package engine

// Set records are reused, so a set that queues and is then granted
// allocates nothing. A kset may go back to the free list only when no
// one can still reach it: refs counts the registry's list (add/remove),
// each place in the pending list (note/giveBack) and each list snapshot
// (list/release), all under the registry's mu. Whoever finishes a set
// (settleSet, withdrawSets) holds one of these while it delivers
// ks.out, so a sink reads a record that is not yet reused. Reuse does
// not touch what the engine writes (AppendState): a set's identity is
// its owner and keys, not its address.

// get returns a kset from the free list, or a new one; the caller
// overwrites all of it.
func (r *setRegistry) get() *kset {
	r.mu.Lock()
	ks := r.free
	if ks != nil {
		r.free, ks.next = ks.next, nil
	}
	r.mu.Unlock()
	if ks == nil {
		ks = new(kset)
	}
	return ks
}

// unrefLocked drops a reference to ks and frees it with the last one.
// Under r.mu.
func (r *setRegistry) unrefLocked(ks *kset) {
	if ks.refs--; ks.refs > 0 {
		return
	}
	*ks = kset{next: r.free}
	r.free = ks
}

// release drops the reference list took on ks.
func (r *setRegistry) release(ks *kset) {
	r.mu.Lock()
	r.unrefLocked(ks)
	r.mu.Unlock()
}
