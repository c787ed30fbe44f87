package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/fence"
)

// stateMagic and stateVersion open every state written by WriteState.
const (
	stateMagic   = "LTCHST"
	stateVersion = 3 // 2: a key per session; 3: lapsed two-phase grants; ReadState still reads 1 and 2
)

// entry flags in the state format.
const (
	flagTwoPhase = 1 << iota // enqueued with e/se and not yet collected
	flagInHeap               // has a deadline: a lease, or a parked wait
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrBadState means ReadState was given bytes that are not a state this
// version wrote (bad magic, version, checksum or structure), or a state
// that does not fit the engine's Config.
var ErrBadState = errors.New("engine: bad state")

// WriteState writes the engine's complete deterministic state to w: the
// fence counter, every shard's resources (key, limit, idle mark and time),
// their holders and waiters in list order (owner, token, salt, TTL,
// deadline, flags), the idle list, deadline heap and owner lists in their
// exact order, the shard's counters and next deadline, and the sessions.
// The bytes are canonical: two engines in the same state write the same
// bytes (resources and owners are written sorted, never in map order).
//
// Sinks are not written: they belong to the process that parked the
// request. See ReadState for what a restored parked request does.
//
// The format is compact binary: magic, a version byte, varint fields, and
// a CRC-32C of everything before it. WriteState locks one shard at a time,
// so the state is consistent only when no mutating call runs meanwhile
// (a Raft FSM's Snapshot is such a moment).
//
// The shards are encoded in parallel, up to GOMAXPROCS at a time. A
// caller that must not keep changes waiting that long (a cluster's
// snapshot: about a microsecond per holding or wait) uses CaptureState.
func (e *Engine) WriteState(w io.Writer) error {
	_, err := w.Write(e.AppendState(nil))
	return err
}

// AppendState appends what WriteState writes to b, growing it once. The
// shards are encoded on up to GOMAXPROCS goroutines.
func (e *Engine) AppendState(b []byte) []byte {
	return e.CaptureState().finish(b, runtime.GOMAXPROCS(0))
}

// A StateCapture is the engine's state at one moment, encoded shard by
// shard afterwards: CaptureState takes what is not per shard at once, and
// a shard is encoded at the first change made to it after that (lockW),
// or by Finish, whichever comes first. So the engine can go on changing
// while a snapshot of a large state is encoded, each change waiting only
// for the shards it changes that are not encoded yet.
type StateCapture struct {
	e       *Engine
	counter uint64         // the fence counter
	sess    []byte         // the sessions' section
	parts   [][]byte       // per shard: appendStateLocked
	lapsed  [][]lapsedList // per shard: its lapsed two-phase grants
}

// lapsedList is one owner's lapsed keys in a shard, sorted.
type lapsedList struct {
	owner OwnerID
	keys  []string
}

// CaptureState begins a capture of the state as it is now. Like
// WriteState it needs no mutating call to run meanwhile, but only for the
// call itself (which is short: it encodes the sessions, and marks the
// shards); Finish then encodes what the changes since have not. One
// capture at a time: a shard another capture still waits for is encoded
// for it first.
func (e *Engine) CaptureState() *StateCapture {
	c := &StateCapture{
		e:       e,
		counter: e.fence.Load(),
		sess:    e.sess.appendState(nil),
		parts:   make([][]byte, len(e.shards)),
		lapsed:  make([][]lapsedList, len(e.shards)),
	}
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		if s.capt != nil {
			s.capt.encodeLocked(s)
		}
		s.capt = c
		s.mu.Unlock()
	}
	return c
}

// lockW locks s for a change: a capture still waiting for s encodes it
// first. Every call that changes a shard locks it with lockW, or with
// mu and settleLocked before its first change (a call that visits every
// shard and changes few, so that the rest stay for the writer).
func (s *shard) lockW() {
	s.mu.Lock()
	s.settleLocked()
}

// settleLocked encodes s for a capture still waiting for it; under mu.
func (s *shard) settleLocked() {
	if s.capt != nil {
		s.capt.encodeLocked(s)
	}
}

// encodeLocked encodes s for c; under s.mu, with s.capt == c.
func (c *StateCapture) encodeLocked(s *shard) {
	c.parts[s.idx] = s.appendStateLocked(make([]byte, 0, 64*len(s.res)+256))
	c.lapsed[s.idx] = s.lapsedLocked()
	s.capt = nil
}

// Finish encodes the shards no change has encoded yet, one at a time,
// and appends the whole state, as WriteState writes it, to b, growing it
// once. It may run beside changes to the engine, and leaves them the
// other processors; call it once.
func (c *StateCapture) Finish(b []byte) []byte { return c.finish(b, 1) }

// finish is Finish on up to workers goroutines.
func (c *StateCapture) finish(b []byte, workers int) []byte {
	e := c.e
	encode := func(i int) {
		s := &e.shards[i]
		s.mu.Lock()
		if s.capt == c {
			c.encodeLocked(s)
		}
		s.mu.Unlock()
	}
	workers = min(workers, len(e.shards))
	if workers <= 1 {
		for i := range e.shards {
			encode(i)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < len(e.shards); i = int(next.Add(1) - 1) {
					encode(i)
				}
			})
		}
		wg.Wait()
	}
	n, lists := 0, 0
	for i, p := range c.parts {
		n += len(p)
		lists += len(c.lapsed[i])
	}
	start := len(b)
	b = slices.Grow(b, n+len(c.sess)+4096)
	b = append(b, stateMagic...)
	b = append(b, stateVersion)
	b = binary.AppendUvarint(b, uint64(len(e.shards)))
	b = binary.AppendUvarint(b, c.counter)
	for _, p := range c.parts {
		b = append(b, p...)
	}
	b = append(b, c.sess...)
	b = appendLapsed(b, c.lapsed, lists)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], crcTable))
}

func (s *shard) appendStateLocked(b []byte) []byte {
	b = binary.AppendVarint(b, s.next.Load())
	for _, c := range [...]uint64{s.ctr.grants, s.ctr.releases, s.ctr.renewals, s.ctr.timeouts,
		s.ctr.expiries, s.ctr.dropped, s.ctr.pruned} {
		b = binary.AppendUvarint(b, c)
	}
	// The resources sorted by key, each with its key: one pass over the
	// map, no lookup per key afterwards (with a large state, every
	// lookup was a cache miss).
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
	owners := make([]OwnerID, 0, len(s.owners))
	for id := range s.owners {
		owners = append(owners, id)
	}
	slices.Sort(owners)
	b = binary.AppendUvarint(b, uint64(len(owners)))
	var list []int32 // one walk of each owner's list (its entries are scattered: a miss each)
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
	ids := make([]OwnerID, 0, len(s.lapsed))
	for id := range s.lapsed {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ls := make([]lapsedList, 0, len(ids))
	for _, id := range ids {
		keys := slices.Clone(s.lapsed[id])
		slices.Sort(keys)
		ls = append(ls, lapsedList{id, keys})
	}
	return ls
}

// appendLapsed writes the shards' lapsed two-phase grants (version 3, the
// last section): how many (shard, owner) lists, then each list in shard
// and owner order with its keys sorted.
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

func (e *Engine) readLapsed(d *stateReader) {
	for range d.count() {
		i := d.index(len(e.shards))
		id := OwnerID(d.uvarint())
		nk := d.count()
		if d.err != nil {
			return
		}
		s := &e.shards[i]
		s.mu.Lock()
		if nk == 0 || s.lapsed[id] != nil {
			s.mu.Unlock()
			d.fail("bad lapsed list of %d", id)
			return
		}
		keys := make([]string, 0, nk)
		for range nk {
			keys = append(keys, string(d.bytes()))
		}
		if s.lapsed == nil {
			s.lapsed = make(map[OwnerID][]string)
		}
		s.lapsed[id] = keys
		s.mu.Unlock()
	}
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
	return append(b, f)
}

func (ss *sessions) appendState(b []byte) []byte {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	// A reserved field (the last session scan, before sessions had a
	// deadline heap), then the earliest session deadline. Both depend on
	// the sessions alone, so equal states still write equal bytes.
	b = binary.AppendVarint(b, 0)
	b = binary.AppendVarint(b, ss.next.Load())
	ids := make([]OwnerID, 0, len(ss.m))
	for id := range ss.m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
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

// ReadState restores a state written by WriteState into e, which must be
// empty (new, with no call made) and built with the same Shards as the
// writer; MaxKeys must admit the restored keys. On error e is left in an
// unspecified state and must be discarded.
//
// A restored parked request (an Acquire or Wait that was waiting with a
// deadline) has no Sink: the process that parked it is the only one that
// had one. It keeps its place in the queue and its deadline, is granted or
// times out exactly as on the writer, and nobody hears the Outcome; like
// an unclaimed two-phase entry, a grant it gets is held until its lease
// expires or its owner is dropped.
func (e *Engine) ReadState(r io.Reader) error {
	if !e.isEmpty() {
		return fmt.Errorf("%w: engine is not empty", ErrBadState)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(b) < len(stateMagic)+1+4 || string(b[:len(stateMagic)]) != stateMagic {
		return fmt.Errorf("%w: bad magic", ErrBadState)
	}
	v := b[len(stateMagic)]
	if v < 1 || v > stateVersion {
		return fmt.Errorf("%w: version %d, want 1 to %d", ErrBadState, v, stateVersion)
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, crcTable) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return fmt.Errorf("%w: checksum mismatch", ErrBadState)
	}
	d := &stateReader{b: body[len(stateMagic)+1:], version: v}
	if n := d.uvarint(); d.err == nil && n != uint64(len(e.shards)) {
		return fmt.Errorf("%w: %d shards, engine has %d", ErrBadState, n, len(e.shards))
	}
	e.fence.Store(d.uvarint())
	var keys int64
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		s.readStateLocked(d)
		s.recountLocked() // the lists were rebuilt directly
		keys += int64(len(s.res))
		s.mu.Unlock()
		if d.err != nil {
			return d.err
		}
	}
	e.keys.Store(keys)
	e.own.recount(e.shards)
	e.sess.readState(d)
	if d.version >= 3 {
		e.readLapsed(d)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return d.err
	}
	if max := e.cfg.MaxKeys; max > 0 && keys > int64(max) {
		return fmt.Errorf("%w: %d keys over MaxKeys %d", ErrBadState, keys, max)
	}
	return nil
}

// isEmpty reports whether e holds no key, session or issued fence.
func (e *Engine) isEmpty() bool {
	if e.keys.Load() != 0 || e.fence.Load() != e.cfg.FenceSeed || e.sess.count() != 0 {
		return false
	}
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		n := len(s.res) + len(s.owners)
		s.mu.Unlock()
		if n != 0 {
			return false
		}
	}
	return true
}

func (s *shard) readStateLocked(d *stateReader) {
	s.next.Store(d.varint())
	for _, c := range [...]*uint64{&s.ctr.grants, &s.ctr.releases, &s.ctr.renewals, &s.ctr.timeouts,
		&s.ctr.expiries, &s.ctr.dropped, &s.ctr.pruned} {
		*c = d.uvarint()
	}
	nres := d.count()
	ress := make([]*resource, 0, nres)
	var ents []*entry
	inHeap := make(map[*entry]bool)
	for range nres {
		key := d.bytes()
		r := &resource{key: string(key), limit: d.intv()}
		switch d.byte() {
		case 0:
		case 1:
			r.idle, r.idleAt = true, d.varint()
		default:
			d.fail("bad idle mark")
		}
		if d.err != nil {
			return
		}
		if r.limit < 1 || s.res[r.key] != nil || s.e.shardFor(key) != s {
			d.fail("bad resource %q", key)
			return
		}
		for qi, q := range [...]*queue{&r.holders, &r.waiters} {
			n := d.count()
			for range n {
				en := &entry{res: r, hidx: -1, holding: qi == 0}
				en.owner = OwnerID(d.uvarint())
				en.token = fence.Token{Fence: d.uvarint(), Salt: d.uint64()}
				en.salt = d.uint64()
				en.ttl = time.Duration(d.varint())
				en.deadline = d.varint()
				f := d.byte()
				if d.err != nil {
					return
				}
				en.twoPhase = f&flagTwoPhase != 0
				if f&flagInHeap != 0 {
					inHeap[en] = true
				}
				q.pushBack(en)
				ents = append(ents, en)
			}
		}
		if r.holders.n > r.limit || (r.holders.n < r.limit && r.waiters.n > 0) || r.idle != r.empty() {
			d.fail("resource %q breaks its invariants", key)
			return
		}
		s.res[r.key] = r
		ress = append(ress, r)
	}
	for range d.count() {
		i := d.index(len(ress))
		if d.err != nil {
			return
		}
		r := ress[i]
		if !r.idle || r.iprev != nil || s.idle.head == r {
			d.fail("bad idle list")
			return
		}
		idleAt := r.idleAt
		s.idle.pushBack(r, idleAt)
	}
	for _, r := range ress {
		if r.idle && r.iprev == nil && s.idle.head != r {
			d.fail("idle resource %q not on the idle list", r.key)
			return
		}
	}
	nheap := d.count()
	s.heap = make(deadlines, 0, nheap)
	for range nheap {
		i := d.index(len(ents))
		if d.err != nil {
			return
		}
		en := ents[i]
		if !inHeap[en] || en.hidx >= 0 {
			d.fail("bad heap")
			return
		}
		en.hidx = len(s.heap)
		s.heap = append(s.heap, en)
	}
	for i, en := range s.heap {
		if i > 0 && s.heap[(i-1)/2].deadline > en.deadline {
			d.fail("heap order broken")
			return
		}
	}
	if len(s.heap) != len(inHeap) {
		d.fail("heap holds %d entries, %d marked", len(s.heap), len(inHeap))
		return
	}
	linked := 0
	for range d.count() {
		id := OwnerID(d.uvarint())
		n := d.count()
		if d.err == nil && (n == 0 || s.owners[id] != nil) {
			d.fail("bad owner list of %d", id)
		}
		var tail *entry
		for range n {
			i := d.index(len(ents))
			if d.err != nil {
				return
			}
			en := ents[i]
			if en.owner != id || en.oprev != nil || s.owners[id] == en {
				d.fail("bad owner list of %d", id)
				return
			}
			if tail == nil {
				s.owners[id] = en
			} else {
				tail.onext, en.oprev = en, tail
			}
			tail = en
			linked++
		}
	}
	s.resPeak, s.ownPeak = len(s.res), len(s.owners) // for the shrink heuristic
	if d.err == nil && linked != len(ents) {
		d.fail("%d entries, %d on owner lists", len(ents), linked)
	}
	for _, en := range ents {
		if en.holding && en.hidx < 0 {
			d.fail("holder without a deadline")
			return
		}
	}
}

func (ss *sessions) readState(d *stateReader) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	// The reserved field and the next deadline are recomputed from the
	// sessions (a state written before the heap holds a scan time there).
	_ = d.varint()
	_ = d.varint()
	for range d.count() {
		id := OwnerID(d.uvarint())
		s := &session{owner: id, ttl: time.Duration(d.varint()), lastSeen: d.varint(), busy: int(d.varint()), hidx: -1}
		if d.version >= 2 {
			s.key = d.uvarint()
		}
		if d.err != nil {
			return
		}
		if ss.m[id] != nil {
			d.fail("session %d twice", id)
			return
		}
		if s.ttl <= 0 {
			d.fail("session %d with ttl %v", id, s.ttl)
			return
		}
		if s.busy < 0 {
			// Only an older engine wrote this (an EndSession after a
			// reopen), and that session could never expire: it can now.
			s.busy = 0
		}
		ss.m[id] = s
	}
	ss.rebuildLocked()
}

// stateReader decodes WriteState's fields; the first error sticks and
// every later read returns zero.
type stateReader struct {
	b       []byte
	err     error
	version byte // of the state being read
}

func (d *stateReader) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrBadState}, args...)...)
	}
}

func (d *stateReader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *stateReader) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("truncated")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *stateReader) uint64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("truncated")
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *stateReader) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// count reads a length that must fit in what is left (every counted item
// takes at least one byte), so a corrupt length cannot allocate wildly.
func (d *stateReader) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("count %d past the end", n)
		return 0
	}
	return int(n)
}

// intv reads a non-negative int.
func (d *stateReader) intv() int {
	n := d.uvarint()
	if n > math.MaxInt32 {
		d.fail("value %d out of range", n)
		return 0
	}
	return int(n)
}

// index reads an index that must be < n.
func (d *stateReader) index(n int) int {
	i := d.uvarint()
	if d.err == nil && i >= uint64(n) {
		d.fail("index %d out of range %d", i, n)
		return 0
	}
	return int(i)
}

func (d *stateReader) bytes() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// ShiftDeadlines moves every time the engine keeps by delta nanoseconds:
// lease and wait deadlines, idle-key times, session last-seen times and
// the next-deadline marks. Relative order is unchanged, so the heaps and
// lists stay valid. Times saturate instead of wrapping; "never" stays
// never.
//
// A new Raft leader uses it so that each lease keeps, measured from the
// new leader's clock, the time it had left at the last applied command:
// delta = newLeaderNow - lastAppliedNow (see replica's Restamp). Like every
// mutating call it must be applied alike on every replica.
func (e *Engine) ShiftDeadlines(delta int64) {
	if delta == 0 {
		return
	}
	for i := range e.shards {
		s := &e.shards[i]
		s.lockW()
		for _, en := range s.heap {
			en.deadline = addSat(en.deadline, delta)
		}
		for r := s.idle.head; r != nil; r = r.inext {
			r.idleAt = addSat(r.idleAt, delta)
		}
		if n := s.next.Load(); n != math.MaxInt64 {
			s.next.Store(addSat(n, delta))
		}
		s.mu.Unlock()
	}
	ss := &e.sess
	ss.mu.Lock()
	for _, s := range ss.m {
		s.lastSeen = addSat(s.lastSeen, delta)
	}
	// Saturation can turn two deadlines into one, and ties go by owner:
	// file the sessions anew (a rare call, like the loops above).
	ss.rebuildLocked()
	ss.mu.Unlock()
}

// addSat returns t+delta, saturated at the int64 range.
func addSat(t, delta int64) int64 {
	s := t + delta
	switch {
	case delta > 0 && s < t:
		return math.MaxInt64
	case delta < 0 && s > t:
		return math.MinInt64
	}
	return s
}
