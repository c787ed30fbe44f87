package replica

// Opening the log: every segment is read back and checked; bad bytes are
// either a write that never finished (cut off) or damage (refused).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// walRepair is what an operator does about a damaged log: the node's data
// cannot be trusted, so it is rebuilt from the others.
const walRepair = "The files are left as they are. Repair this node as one that lost its disk " +
	"(docs/cluster.md, \"A node lost its disk\"): remove it from the cluster " +
	"(DELETE /v1/admin/voters/{id} on the leader), empty its --raft-dir (move it aside to keep it " +
	"for diagnosis), and add it back as a new member (start it with --join and a new --node-id); " +
	"it catches up from the leader's snapshot and log"

// OpenWAL opens (or creates) the log in dir; segmentSize 0 means the
// default. The caller keeps other processes out of dir (the LOCK file).
//
// Open changes no file. A bad record is taken for a write that never
// finished only at the tail of the newest segment, if nothing intact
// follows it (intactAfter) and it looks unfinished (unfinished); cutTorn
// cuts it off before the next write. Any other damage refuses the open
// with errWALCorrupt naming the file and the byte offset.
func OpenWAL(dir string, segmentSize int64) (*WAL, error) {
	if segmentSize <= 0 {
		segmentSize = walSegmentSize
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("replica: %w", err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil { // the new name is durable
			return nil, fmt.Errorf("replica: %w", err)
		}
	}
	w := &WAL{dir: dir, max: segmentSize}
	if err := w.readSegments(); err != nil {
		_ = w.closeAllLocked()
		return nil, err
	}
	w.bounds()
	return w, nil
}

// readSegments opens and checks every segment into w.segs, oldest first.
func (w *WAL) readSegments() error {
	names, err := indexedFiles(w.dir, walExt)
	if err != nil {
		return err
	}
	for i, first := range names {
		s, err := w.openSegment(first, i == len(names)-1)
		if err != nil {
			return err
		}
		w.segs = append(w.segs, s)
		if i == 0 {
			continue
		}
		prev := w.segs[i-1]
		if len(prev.offs) == 0 {
			// An empty segment only makes sense at the end, as the next to fill.
			return fmt.Errorf("%w: empty segment %s before others. %s", errWALCorrupt, w.path(prev.first), walRepair)
		}
		if want := prev.first + uint64(len(prev.offs)); s.first != want {
			return fmt.Errorf("%w: %s starts at entry %d, want %d (entries are missing). %s",
				errWALCorrupt, w.path(first), s.first, want, walRepair)
		}
	}
	return nil
}

func (w *WAL) path(first uint64) string { return indexedPath(w.dir, first, walExt) }

// openSegment reads a segment's records, without changing the file. After
// the last record come zeros (preallocated) or, in the newest segment, a
// write that never finished (w.torn). Anything else is damage.
func (w *WAL) openSegment(first uint64, tail bool) (*walSegment, error) {
	f, err := os.OpenFile(w.path(first), os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("replica: read %s: %w", f.Name(), err)
	}
	off, err := readSegHeader(data, first, f.Name())
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	s := &walSegment{first: first, f: f, alloc: int64(len(data))}
	for off < int64(len(data)) {
		n, ok := walCheck(data[off:], first+uint64(len(s.offs)))
		if !ok {
			break
		}
		s.offs = append(s.offs, off)
		off += int64(n)
	}
	s.size = off
	rest := bytes.TrimRight(data[off:], "\x00")
	if len(rest) == 0 {
		return s, nil
	}
	next := first + uint64(len(s.offs))
	why := "it is in a segment older than the newest"
	if tail {
		at := intactAfter(data, off, next)
		switch {
		case at < 0 && unfinished(data, off):
			// A write that never finished: never acknowledged, so it goes.
			w.cut = int64(len(rest))
			w.torn = s
			return s, nil
		case at < 0:
			why = "the entry is whole (no disk sector of it is blank) but does not match its checksum"
		default:
			why = fmt.Sprintf("an intact entry follows it at byte %d", at)
		}
	}
	_ = f.Close()
	return nil, fmt.Errorf("%w: %s is damaged at byte %d (entry %d): %s, so it is not a write "+
		"that a crash cut short. %s", errWALCorrupt, f.Name(), off, next, why, walRepair)
}

// cutTorn cuts off the unfinished write Open found, if its segment is
// still there, before anything is written after it. w.wmu is held.
func (w *WAL) cutTorn() error {
	s := w.torn
	if s == nil {
		return nil
	}
	w.torn = nil
	if !slices.Contains(w.segs, s) || s.alloc == s.size {
		return nil // removed, or already cut (deleteSuffix)
	}
	if err := s.f.Truncate(s.size); err != nil {
		return err
	}
	s.alloc = s.size
	return s.f.Sync()
}

// intactAfter returns the offset of the first intact record (holding an
// index from next on) after the bad one at off, or -1 if there is none:
// nothing intact can follow a write a crash interrupted.
func intactAfter(data []byte, off int64, next uint64) int64 {
	// Each record takes more than walHeaderSize bytes: an index further
	// on than this cannot be in the bytes left.
	most := next + uint64(int64(len(data))-off)/walHeaderSize
	for p := off + 1; p+walHeaderSize < int64(len(data)); p++ {
		idx := binary.LittleEndian.Uint64(data[p+8:])
		if idx < next || idx > most {
			continue
		}
		if _, ok := walCheck(data[p:], idx); ok {
			return p
		}
	}
	return -1
}

// walSector is the unit a disk writes whole or not at all.
const walSector = 512

// unfinished reports whether the bad record at off can be a write that a
// crash cut short: its header does not describe a record that fits in
// data (the write ended inside it), or a part of it still holds the zeros
// the segment was preallocated with: its end (a write that stopped short)
// or a whole disk sector of it (sectors written out of order). Every
// record ends in one zero byte (encodeRecord's empty field), so a write
// that lost any byte that is not zero ends in two or more. A whole record
// with a wrong checksum is damage: it may have been acknowledged, and
// cutting it could lose a committed entry that the node's commit index
// has not caught up with.
func unfinished(data []byte, off int64) bool {
	b := data[off:]
	if len(b) < walHeaderSize {
		return true
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > walMaxRecord || uint64(len(b)) < walHeaderSize+uint64(n) {
		return true
	}
	end := off + walHeaderSize + int64(n)
	if data[end-1] == 0 && data[end-2] == 0 {
		return true
	}
	for p := off; p < end; {
		next := min(end, (p/walSector+1)*walSector)
		if len(bytes.TrimLeft(data[p:next], "\x00")) == 0 {
			return true
		}
		p = next
	}
	return false
}

// walCheck reports the size of the record at the front of b, if it is
// whole, intact and holds index.
func walCheck(b []byte, index uint64) (int, bool) {
	if len(b) < walHeaderSize {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > walMaxRecord || uint64(len(b)) < walHeaderSize+uint64(n) {
		return 0, false
	}
	rec := b[8 : walHeaderSize+int(n)]
	if crc32.Checksum(rec, walCRC) != binary.LittleEndian.Uint32(b[4:]) ||
		binary.LittleEndian.Uint64(rec) != index {
		return 0, false
	}
	return walHeaderSize + int(n), true
}
