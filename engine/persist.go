package engine

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
)

// stateMagic and stateVersion open every state written by WriteState.
const (
	stateMagic   = "LTCHST"
	stateVersion = 4 // 2: a key per session; 3: lapsed two-phase grants; 4: waiting sets; ReadState still reads 1 to 3
	// setsVersion is the first version with the waiting sets' section. A
	// state without a waiting set is written as version 3, which nodes
	// built before sets read (a rolling upgrade).
	setsVersion = 4
	// stateVersionDelays (5) adds the lock-delay sections after the
	// waiting sets'; a state is written as version 5 only while it holds
	// a lock-delay, so that an engine that uses none writes what older
	// ones read.
	stateVersionDelays = 5
)

// entry flags in the state format.
const (
	flagTwoPhase = 1 << iota // enqueued with e/se and not yet collected
	flagInHeap               // has a deadline: a lease, or a parked wait
	flagShared               // a reader of a read-write key (limit 0 in the state)
	flagSet                  // a waiting set's entry (AcquireSet); see setRegistry.appendState
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrBadState means ReadState was given bytes that are not a state this
// version wrote (bad magic, version, checksum or structure), or a state
// that does not fit the engine's Config.
var ErrBadState = errors.New("engine: bad state")

// WriteState writes the engine's complete deterministic state to w: the
// fence counter; per shard its counters, next deadline, resources with
// their holders and waiters, and its idle list, deadline heap and owner
// lists in their exact order; the sessions; the lapsed two-phase grants.
// The bytes are canonical: two engines in the same state write the same
// bytes (maps are written sorted). Sinks are not written (see ReadState).
//
// The format is magic, a version byte, varint fields and a CRC-32C of
// everything before it. The shards are encoded in parallel, each under
// its own lock, so the state is consistent only when no mutating call
// runs meanwhile; a caller that must keep applying changes uses
// CaptureState.
func (e *Engine) WriteState(w io.Writer) error {
	_, err := w.Write(e.AppendState(nil))
	return err
}

// AppendState appends what WriteState writes to b, growing it once.
func (e *Engine) AppendState(b []byte) []byte {
	return e.CaptureState().finish(b, runtime.GOMAXPROCS(0))
}

func (s *shard) appendStateLocked(b []byte) []byte {
	b = binary.AppendVarint(b, s.next.Load())
	for _, c := range s.ctr.all() {
		b = binary.AppendUvarint(b, *c)
	}
	// The resources sorted with their keys: no map lookup per key.
	keys := make([]keyedRes, 0, len(s.res))
	for k, r := range s.res {
		keys = append(keys, keyedRes{k, r})
	}
	slices.SortFunc(keys, func(a, b keyedRes) int { return strings.Compare(a.k, b.k) })
	// Entries and resources are numbered in the order written (sidx),
	// for the idle list, the heap and the owner lists below.
	entries := 0
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for i, kr := range keys {
		k, r := kr.k, kr.r
		r.sidx = int32(i)
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(r.limit))
		if r.idle {
			b = append(b, 1)
			b = binary.AppendVarint(b, r.idleAt)
		} else {
			b = append(b, 0)
		}
		for _, q := range [...]*queue{&r.holders, &r.waiters} {
			b = binary.AppendUvarint(b, uint64(q.n))
			for en := q.head; en != nil; en = en.qnext {
				en.sidx = int32(entries)
				entries++
				b = appendEntry(b, en)
			}
		}
	}
	n := 0
	for r := s.idle.head; r != nil; r = r.inext {
		n++
	}
	b = binary.AppendUvarint(b, uint64(n))
	for r := s.idle.head; r != nil; r = r.inext {
		b = binary.AppendUvarint(b, uint64(r.sidx))
	}
	// The heap's layout decides which of two equal deadlines Expire
	// handles first, and so who is granted which fence: keep it exactly.
	b = binary.AppendUvarint(b, uint64(len(s.heap)))
	for _, en := range s.heap {
		b = binary.AppendUvarint(b, uint64(en.sidx))
	}
	owners := slices.Sorted(maps.Keys(s.owners))
	b = binary.AppendUvarint(b, uint64(len(owners)))
	var list []int32 // each owner's list walked once: its entries are scattered
	for _, id := range owners {
		b = binary.AppendUvarint(b, uint64(id))
		list = list[:0]
		for en := s.owners[id]; en != nil; en = en.onext {
			list = append(list, en.sidx)
		}
		b = binary.AppendUvarint(b, uint64(len(list)))
		for _, x := range list {
			b = binary.AppendUvarint(b, uint64(x))
		}
	}
	return b
}

// keyedRes is a resource with its key, for sorting.
type keyedRes struct {
	k string
	r *resource
}

// lapsedLocked lists s's lapsed two-phase grants by owner, keys sorted;
// under s.mu.
func (s *shard) lapsedLocked() []lapsedList {
	if len(s.lapsed) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(s.lapsed))
	ls := make([]lapsedList, 0, len(ids))
	for _, id := range ids {
		keys := slices.Clone(s.lapsed[id])
		slices.Sort(keys)
		ls = append(ls, lapsedList{id, keys})
	}
	return ls
}

// appendLapsed writes the shards' lapsed two-phase grants (version 3):
// how many (shard, owner) lists, then each in shard and owner order.
func appendLapsed(b []byte, shards [][]lapsedList, lists int) []byte {
	b = binary.AppendUvarint(b, uint64(lists))
	for i, ls := range shards {
		for _, l := range ls {
			b = binary.AppendUvarint(b, uint64(i))
			b = binary.AppendUvarint(b, uint64(l.owner))
			b = binary.AppendUvarint(b, uint64(len(l.keys)))
			for _, k := range l.keys {
				b = binary.AppendUvarint(b, uint64(len(k)))
				b = append(b, k...)
			}
		}
	}
	return b
}

func appendEntry(b []byte, en *entry) []byte {
	b = binary.AppendUvarint(b, uint64(en.owner))
	b = binary.AppendUvarint(b, en.token.Fence)
	b = binary.BigEndian.AppendUint64(b, en.token.Salt)
	b = binary.BigEndian.AppendUint64(b, en.salt)
	b = binary.AppendVarint(b, int64(en.ttl))
	b = binary.AppendVarint(b, en.deadline)
	var f byte
	if en.twoPhase {
		f |= flagTwoPhase
	}
	if en.hidx >= 0 {
		f |= flagInHeap
	}
	if en.shared {
		f |= flagShared
	}
	if en.set != nil {
		f |= flagSet
	}
	return append(b, f)
}

func (ss *sessions) appendState(b []byte) []byte {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	// A reserved field (once the last session scan), then the earliest
	// session deadline: both depend on the sessions alone.
	b = binary.AppendVarint(b, 0)
	b = binary.AppendVarint(b, ss.next.Load())
	ids := slices.Sorted(maps.Keys(ss.m))
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		s := ss.m[id]
		b = binary.AppendUvarint(b, uint64(id))
		b = binary.AppendVarint(b, int64(s.ttl))
		b = binary.AppendVarint(b, s.lastSeen)
		b = binary.AppendVarint(b, int64(s.busy))
		b = binary.AppendUvarint(b, s.key)
	}
	return b
}
