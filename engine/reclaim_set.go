package engine

// ReclaimSet moves from's waiting set whose first key is key to the
// owner to, with sink as its SetSink; the sink it had hears Canceled.
// The set keeps its place in every queue and its deadline: this is how a
// retried set request (a client's, after the connection it waited on
// died) takes back the wait its first attempt left, as Reclaim does a
// single key's. from and to may be the same owner (a session's retry).
// It reports false when from has no such set waiting (granted, timed
// out or withdrawn meanwhile, or never queued).
func (e *Engine) ReclaimSet(now int64, key []byte, from, to OwnerID, sink SetSink) bool {
	if len(key) == 0 || from == 0 || to == 0 || e.sets.setsEmpty() {
		return false
	}
	found := false
	for _, ks := range e.sets.list(func(ks *kset) bool { return ks.owner == from && ks.keys[0] == string(key) }) {
		var old SetSink
		locks := ks.locks[:ks.nl]
		e.lockSet(locks)
		if !ks.done && !ks.timedOut && !found {
			found = true
			e.moveSetLocked(ks, to)
			old, ks.sink = ks.sink, sink
		}
		e.unlockSet(locks)
		if old != nil && old != sink {
			old.DeliverSet(&SetOutcome{Result: Canceled, N: ks.n})
		}
		e.sets.release(ks)
	}
	e.settleSets(now, nil)
	return found
}

// moveSetLocked gives ks's entries, and ks, to the owner to. Under the
// locks of ks's shards.
func (e *Engine) moveSetLocked(ks *kset, to OwnerID) {
	from := ks.owner
	if to == from {
		return
	}
	for i, en := range ks.ents[:ks.n] {
		s := &e.shards[ks.sidx[i]]
		s.unlinkOwner(en)
		e.own.done(from)
		en.owner = to
		e.own.add(to)
		s.linkOwner(en)
	}
	e.sets.mu.Lock()
	ks.owner = to // the registry matches on it under its mu
	e.sets.mu.Unlock()
}
