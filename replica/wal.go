package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// WAL is the raft log: append-only segment files, one write and one
// fdatasync per Append. Each record is one raft entry. A segment is named
// by the index of its first record (%020d.wal); it opens with a header
// (walSegHeader; none in a segment of data format 1, format.go) and holds
// consecutive records:
//
//	u32 body length | u32 CRC-32C of index and body | u64 index | body
//
// where body is a walRecord's encoding (encodeRecord). Recovery and
// deletion are as docs/design/storage.md says; a prefix deleted inside a
// segment is only remembered in memory (after a restart the node skips
// those entries, below the snapshot).
type WAL struct {
	dir  string
	max  int64 // roll to a new segment once the active one is this big
	wmu  sync.Mutex
	mu   sync.RWMutex // segs, first, last; wmu is taken first
	segs []*walSegment
	// first and last are the log's bounds, 0 and 0 when it is empty.
	first, last   uint64
	cut           int64       // bytes of an unfinished write Open found at the tail
	torn          *walSegment // the segment they are in, until cutTorn cuts them; under wmu
	closed        bool        // under mu
	err           error       // under wmu; sticky: a failed write leaves the tail unknown
	buf           []byte
	testSyncDelay atomic.Int64          // tests: nanoseconds each write of the log waits first
	testSyncErr   atomic.Pointer[error] // tests: each write of the log lands but its fdatasync fails with it
}

type walSegment struct {
	first uint64 // index of its first record
	f     *os.File
	offs  []int64 // offs[i]: offset of record first+i
	size  int64   // end of the last record
	alloc int64   // the file's length: zeros from size on (walPrealloc), but for WAL.torn
}

const (
	walSegmentSize = 64 << 20
	walHeaderSize  = 16
	walMaxRecord   = 64 << 20 // a body above this is damage, not an entry
	walExt         = ".wal"
	// walPrealloc is how far ahead of the last record a segment's file is
	// filled with zeros (and fsynced once), so that a record's fdatasync
	// does not change the file's size and flushes the data alone.
	walPrealloc = 1 << 20
)

var (
	walCRC = crc32.MakeTable(crc32.Castagnoli)

	errWALCorrupt = errors.New("replica: corrupt raft log")
	errWALClosed  = errors.New("replica: raft log closed")
	errNoRecord   = errors.New("replica: no such raft log entry")
)

// bounds sets first and last from the segments. w.mu is held (or w is
// not shared yet).
func (w *WAL) bounds() {
	w.first, w.last = 0, 0
	for _, s := range w.segs {
		if len(s.offs) == 0 {
			continue
		}
		if w.first == 0 {
			w.first = s.first
		}
		w.last = s.first + uint64(len(s.offs)) - 1
	}
}

// Cut returns how many bytes of an unfinished write Open found at the
// tail, to be cut off before the next write. The caller logs it: a large
// cut after a clean stop means damage.
func (w *WAL) Cut() int64 { return w.cut }

// FirstIndex is the index of the log's first entry: 0 when it is empty.
func (w *WAL) FirstIndex() uint64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.first
}

// LastIndex is the index of the log's last entry: 0 when it is empty.
func (w *WAL) LastIndex() uint64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.last
}

// Get reads the entry at index (errNoRecord outside the log).
func (w *WAL) Get(index uint64) (walRecord, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return walRecord{}, errWALClosed
	}
	if w.first == 0 || index < w.first || index > w.last {
		return walRecord{}, errNoRecord
	}
	i, _ := slices.BinarySearchFunc(w.segs, index, func(s *walSegment, idx uint64) int {
		switch {
		case s.first+uint64(len(s.offs)) <= idx:
			return -1
		case s.first > idx:
			return 1
		}
		return 0
	})
	s := w.segs[i]
	k := index - s.first
	end := s.size
	if k+1 < uint64(len(s.offs)) {
		end = s.offs[k+1]
	}
	rec := make([]byte, end-s.offs[k])
	if _, err := s.f.ReadAt(rec, s.offs[k]); err != nil {
		return walRecord{}, fmt.Errorf("replica: read log %d: %w", index, err)
	}
	if _, ok := walCheck(rec, index); !ok {
		return walRecord{}, fmt.Errorf("%w: entry %d in %s", errWALCorrupt, index, s.f.Name())
	}
	return decodeRecord(rec[walHeaderSize:], index)
}

// Append writes recs and fdatasyncs them before it returns. They follow
// the last entry, or start past a gap (after a snapshot install that
// covers it), and then what is older goes.
func (w *WAL) Append(recs []walRecord) error {
	if len(recs) == 0 {
		return nil
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.mu.RLock()
	last, empty := w.last, w.first == 0
	w.mu.RUnlock()
	next := recs[0].Index
	for i, r := range recs {
		if r.Index != next+uint64(i) {
			return fmt.Errorf("replica: log entries out of order: %d after %d", r.Index, next+uint64(i)-1)
		}
	}
	switch {
	case empty || next == last+1:
	case next > last+1:
		if err := w.removeSegments(w.segs); err != nil {
			return w.fail(err)
		}
		empty = true
	default:
		return fmt.Errorf("replica: log entry %d does not follow %d", next, last)
	}
	w.buf = w.buf[:0]
	offs := make([]int64, 0, len(recs))
	for _, r := range recs {
		offs = append(offs, int64(len(w.buf)))
		w.buf = walAppend(w.buf, r)
	}

	if err := w.cutTorn(); err != nil {
		return w.fail(err)
	}
	s, err := w.active(next, empty)
	if err != nil {
		return w.fail(err)
	}
	hdr := int64(0)
	if s.size == 0 { // a new segment: its header goes with its first records
		w.buf = append(walSegHeader(s.first), w.buf...)
		hdr = walHeaderSize
	}
	if end := s.size + int64(len(w.buf)); end > s.alloc {
		if err := s.prealloc(end); err != nil {
			return w.fail(err)
		}
	}
	if d := w.testSyncDelay.Load(); d > 0 { // tests: a slow disk
		time.Sleep(time.Duration(d))
	}
	if _, err = s.f.WriteAt(w.buf, s.size); err == nil {
		if e := w.testSyncErr.Load(); e != nil { // tests: a full or failing disk
			err = *e
		} else {
			err = fdatasync(s.f)
		}
	}
	if err != nil {
		return w.fail(err)
	}
	w.mu.Lock()
	for _, o := range offs {
		s.offs = append(s.offs, s.size+hdr+o)
	}
	s.size += int64(len(w.buf))
	if w.first == 0 {
		w.first = next
	}
	w.last = next + uint64(len(recs)) - 1
	w.mu.Unlock()
	if cap(w.buf) > 4*walSegmentSize/64 {
		w.buf = nil // do not keep a burst's buffer
	}
	return nil
}

func walAppend(b []byte, r walRecord) []byte {
	start := len(b)
	b = append(b, make([]byte, walHeaderSize)...)
	binary.LittleEndian.PutUint64(b[start+8:], r.Index)
	b = encodeRecord(b, r)
	rec := b[start+8:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(rec)-8))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(rec, walCRC))
	return b
}

// active returns the segment the next write goes to, starting a new one
// at next when the log is empty or the newest is full. w.wmu is held.
func (w *WAL) active(next uint64, empty bool) (*walSegment, error) {
	w.mu.RLock()
	var cur *walSegment
	if len(w.segs) > 0 {
		cur = w.segs[len(w.segs)-1]
	}
	w.mu.RUnlock()
	switch {
	case cur != nil && empty && len(cur.offs) == 0 && cur.first == next:
		return cur, nil
	case cur != nil && !empty && cur.size < w.max:
		return cur, nil
	}
	if cur != nil && empty {
		// Only an empty segment can be left when the log is empty; it
		// was started for an index the log no longer continues from.
		if err := w.removeSegments(w.segs); err != nil {
			return nil, err // the caller makes it sticky
		}
	}
	f, err := os.OpenFile(w.path(next), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syncDir(w.dir); err != nil {
		_ = f.Close()
		return nil, err
	}
	s := &walSegment{first: next, f: f}
	w.mu.Lock()
	w.segs = append(w.segs, s)
	w.mu.Unlock()
	return s, nil
}

// prealloc fills the file with zeros up to at least end (rounded up to
// walPrealloc) and syncs it, size included.
func (s *walSegment) prealloc(end int64) error {
	n := (end + walPrealloc - 1) / walPrealloc * walPrealloc
	if _, err := s.f.WriteAt(make([]byte, n-s.alloc), s.alloc); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	s.alloc = n
	return nil
}

// fail makes err sticky: after a failed write the file's tail is unknown,
// and only a restart (which reads it back) can tell what is there.
func (w *WAL) fail(err error) error {
	w.err = fmt.Errorf("replica: raft log write: %w", err)
	return w.err
}

// DeleteRange removes [min, max], which must take in the first or the
// last entry.
func (w *WAL) DeleteRange(min, max uint64) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.mu.RLock()
	first, last := w.first, w.last
	w.mu.RUnlock()
	if first == 0 || max < first || min > last || min > max {
		return nil
	}
	switch {
	case min <= first && max >= last:
		if err := w.removeSegments(w.segs); err != nil {
			return w.fail(err)
		}
	case min <= first:
		return w.deletePrefix(max + 1)
	case max >= last:
		if err := w.deleteSuffix(min); err != nil {
			return w.fail(err)
		}
	default:
		return fmt.Errorf("replica: delete of log entries %d-%d inside %d-%d", min, max, first, last)
	}
	return nil
}

// deletePrefix makes first the first index, removing the segments wholly
// below it.
func (w *WAL) deletePrefix(first uint64) error {
	var drop []*walSegment
	for _, s := range w.segs[:len(w.segs)-1] {
		if s.first+uint64(len(s.offs)) > first {
			break
		}
		drop = append(drop, s)
	}
	w.mu.Lock()
	w.first = first
	w.mu.Unlock()
	if err := w.removeSegments(drop); err != nil {
		return w.fail(err)
	}
	return nil
}

// deleteSuffix cuts the log before index min.
func (w *WAL) deleteSuffix(min uint64) error {
	i := len(w.segs) - 1
	for i > 0 && w.segs[i].first > min {
		i--
	}
	if err := w.removeSegments(w.segs[i+1:]); err != nil {
		return err
	}
	s := w.segs[i]
	k := min - s.first
	off := s.offs[k]
	w.mu.Lock() // readers stop seeing the entries before they go
	s.offs = s.offs[:k]
	s.size = off
	w.last = min - 1
	w.mu.Unlock()
	if err := s.f.Truncate(off); err != nil {
		return err
	}
	s.alloc = off
	return fdatasync(s.f)
}

// removeSegments deletes segs, a prefix or a suffix of w.segs, from w.segs
// and from disk, from the outer end inward, each unlink synced before the
// next, so that a crash or a failure part way leaves no gap in the files
// (the caller makes a failure sticky). w.wmu is held.
func (w *WAL) removeSegments(segs []*walSegment) error {
	if len(segs) == 0 {
		return nil
	}
	segs = slices.Clone(segs)
	w.mu.Lock() // readers stop seeing them before their files close
	suffix := segs[0] != w.segs[0]
	if suffix {
		w.segs = w.segs[:len(w.segs)-len(segs)]
		slices.Reverse(segs)
	} else {
		w.segs = slices.Clone(w.segs[len(segs):])
	}
	if len(w.segs) == 0 {
		w.first, w.last = 0, 0
	}
	w.mu.Unlock()
	var err error
	for _, s := range segs {
		_ = s.f.Close() // read-only by now: nothing to lose
		if err == nil {
			if err = os.Remove(s.f.Name()); err == nil || errors.Is(err, os.ErrNotExist) {
				err = syncDir(w.dir)
			}
		}
	}
	return err
}

// Close closes the segment files.
func (w *WAL) Close() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.closeAllLocked()
	w.closed, w.err = true, errWALClosed
	return err
}

func (w *WAL) closeAllLocked() error {
	var errs []error
	for _, s := range w.segs {
		errs = append(errs, s.f.Close())
	}
	w.segs = nil
	w.first, w.last = 0, 0
	return errors.Join(errs...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// walRecord is one entry of the log: its index and term, and Data, the
// marshalled raftpb.Entry.
type walRecord struct {
	Index, Term uint64
	Data        []byte
}

// A record's body: a version byte (1), the term as a uvarint, a type
// byte (0), a varint (0), Data length-prefixed (uvarint), and an empty
// length-prefixed field: the layout every release has written.
const walRecordVersion = 1

func encodeRecord(b []byte, r walRecord) []byte {
	b = append(b, walRecordVersion)
	b = binary.AppendUvarint(b, r.Term)
	b = append(b, 0, 0) // type, and the varint 0
	b = binary.AppendUvarint(b, uint64(len(r.Data)))
	b = append(b, r.Data...)
	return append(b, 0) // an empty field
}

// decodeRecord decodes the body v of the record at index; what it returns
// does not share v's memory.
func decodeRecord(v []byte, index uint64) (walRecord, error) {
	if len(v) > 0 && v[0] > walRecordVersion {
		return walRecord{}, fmt.Errorf("%w: the log entry at index %d is of record version %d; this release reads %d",
			ErrNewerFormat, index, v[0], walRecordVersion)
	}
	if len(v) < 1 || v[0] != walRecordVersion {
		return walRecord{}, fmt.Errorf("%w: bad record at index %d", errWALCorrupt, index)
	}
	d := decoder{b: v[1:]}
	term := d.uvarint()
	if !d.bad && len(d.b) > 0 {
		d.b = d.b[1:] // the type
	} else {
		d.bad = true
	}
	d.varint()
	data := d.bytes()
	d.bytes()
	if d.bad || len(d.b) != 0 {
		return walRecord{}, fmt.Errorf("%w: bad record at index %d", errWALCorrupt, index)
	}
	return walRecord{Index: index, Term: term, Data: bytes.Clone(data)}, nil
}
