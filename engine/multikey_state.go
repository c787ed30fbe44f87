package engine

import (
	"encoding/binary"
	"slices"
)

// restoringSet marks a set's entry that ReadState has read but readSets
// has not linked to its set yet.
var restoringSet kset

// appendState writes the waiting sets (state version 4), oldest first:
// how many, then each one's owner, whether its wait has timed out, and
// its keys in order. Its entries are the set-flagged waiters of the
// owner on those keys, the first such on each key for the oldest set;
// the wait's deadline is its first entry's.
func (r *setRegistry) appendState(b []byte) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	b = binary.AppendUvarint(b, uint64(r.n))
	for ks := r.head; ks != nil; ks = ks.next {
		b = binary.AppendUvarint(b, uint64(ks.owner))
		var f byte
		if ks.timedOut {
			f = 1
		}
		b = append(b, f)
		b = binary.AppendUvarint(b, uint64(ks.n))
		for _, k := range ks.keys[:ks.n] {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
		}
	}
	return b
}

// readSets restores the waiting sets as appendState wrote them and links
// their entries; every set-flagged entry must belong to one.
func (e *Engine) readSets(d *stateReader) {
	for range d.count() {
		ks := &kset{owner: OwnerID(d.uvarint())}
		ks.timedOut = d.byte() == 1
		ks.n = d.count()
		if d.err != nil {
			return
		}
		if ks.n < 1 || ks.n > MaxSetKeys {
			d.fail("set of %d keys", ks.n)
			return
		}
		keys := make([][]byte, ks.n)
		for i := range ks.n {
			keys[i] = slices.Clone(d.bytes())
		}
		if d.err != nil {
			return
		}
		ks.nl = e.setShards(keys, &ks.sidx, &ks.locks)
		for i, k := range keys {
			r := e.shards[ks.sidx[i]].res[string(k)]
			if r == nil {
				d.fail("set key %q unknown", k)
				return
			}
			en := r.waiters.head
			for en != nil && (en.set != &restoringSet || en.owner != ks.owner) {
				en = en.qnext
			}
			if en == nil {
				d.fail("set key %q has no entry of %d", k, ks.owner)
				return
			}
			en.set, ks.ents[i], ks.keys[i] = ks, en, r.key
		}
		ks.ttl = ks.ents[0].ttl
		if ks.ents[0].hidx < 0 && !ks.timedOut {
			d.fail("waiting set without a deadline")
			return
		}
		e.sets.add(ks)
		if ks.timedOut {
			e.sets.note(ks)
		}
	}
	e.checkSetsLinked(d)
}

// checkSetsLinked fails d when a set-flagged entry was left unlinked.
func (e *Engine) checkSetsLinked(d *stateReader) {
	for i := range e.shards {
		for _, r := range e.shards[i].res {
			for _, q := range [...]*queue{&r.holders, &r.waiters} {
				for en := q.head; en != nil; en = en.qnext {
					if en.set == &restoringSet || en.holding && en.set != nil { // a holder is in no set
						d.fail("set entry on %q without its set", r.key)
						return
					}
				}
			}
		}
	}
}

// version is the state version c writes: setsVersion with waiting sets,
// the one before it without (its sets' section is then the single count
// byte 0, and left out).
func (c *StateCapture) version() byte {
	if len(c.sets) == 1 && c.sets[0] == 0 {
		return setsVersion - 1
	}
	return stateVersion
}
