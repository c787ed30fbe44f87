package fencefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// On-disk layout. Each slot is one record at the start of its own 4 KiB
// block, so a write the device tears or garbles (a whole unreadable
// sector, not only mixed old and new bytes) can damage only the slot being
// written. All integers are big-endian.
//
//	offset size field
//	0      4    magic "LFJ\x00"
//	4      4    version (1)
//	8      8    seq: 1 for the first record, +1 per write
//	16     8    limit: highest fence the writer may issue
//	24     8    step: the writer's reservation range, bounding the next limit
//	32     4    CRC-32C of bytes 0..31
const (
	recordSize = 36
	slotStride = 4096
	version    = 1
)

var (
	magic  = [4]byte{'L', 'F', 'J', 0}
	crcTab = crc32.MakeTable(crc32.Castagnoli)
)

// record is one slot's content.
type record struct {
	seq, limit, step uint64
}

// slotOf returns the slot a record with seq is written to: writes
// alternate, so the newest valid record is never overwritten.
func slotOf(seq uint64) int { return int(seq % 2) }

func (r record) encode() [recordSize]byte {
	var b [recordSize]byte
	copy(b[0:4], magic[:])
	binary.BigEndian.PutUint32(b[4:8], version)
	binary.BigEndian.PutUint64(b[8:16], r.seq)
	binary.BigEndian.PutUint64(b[16:24], r.limit)
	binary.BigEndian.PutUint64(b[24:32], r.step)
	binary.BigEndian.PutUint32(b[32:36], crc32.Checksum(b[:32], crcTab))
	return b
}

var (
	// errNewerVersion marks a well-formed record of a format this code
	// does not know: falling back to the other slot could ignore the
	// newest limit, so Open refuses.
	errNewerVersion = errors.New("written by a newer latchd")
	// errEmpty marks a slot that was never written: missing or all zero.
	errEmpty = errors.New("empty")
)

// decode parses a slot from the bytes read (short if the file is); the
// error says why it is unusable (ErrCorrupt's message, Recovered).
func decode(b []byte) (record, error) {
	switch {
	case len(bytes.Trim(b, "\x00")) == 0:
		return record{}, errEmpty
	case len(b) < recordSize:
		return record{}, fmt.Errorf("truncated (%d of %d bytes)", len(b), recordSize)
	case [4]byte(b[0:4]) != magic:
		return record{}, fmt.Errorf("bad magic %q", b[0:4])
	case binary.BigEndian.Uint32(b[32:36]) != crc32.Checksum(b[:32], crcTab):
		return record{}, errors.New("checksum mismatch")
	}
	if v := binary.BigEndian.Uint32(b[4:8]); v != version {
		return record{}, fmt.Errorf("%w (format version %d, this one reads %d)", errNewerVersion, v, version)
	}
	r := record{
		seq:   binary.BigEndian.Uint64(b[8:16]),
		limit: binary.BigEndian.Uint64(b[16:24]),
		step:  binary.BigEndian.Uint64(b[24:32]),
	}
	if r.seq == 0 || r.step == 0 || r.limit < r.step {
		return record{}, fmt.Errorf("impossible values (seq %d, limit %d, step %d)", r.seq, r.limit, r.step)
	}
	return r, nil
}

// readSlot reads and decodes slot i. A read error (EIO on a bad sector)
// makes only that slot unusable.
func readSlot(f *os.File, i int) (record, error) {
	var b [recordSize]byte
	n, err := f.ReadAt(b[:], int64(i)*slotStride)
	if err != nil && !errors.Is(err, io.EOF) {
		return record{}, fmt.Errorf("read: %v", err)
	}
	return decode(b[:n])
}
