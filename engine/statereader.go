package engine

import (
	"encoding/binary"
	"fmt"
	"math"
)

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
	v, n := binary.Uvarint(d.b)
	if d.take(n) == nil {
		return 0
	}
	return v
}

func (d *stateReader) varint() int64 {
	v, n := binary.Varint(d.b)
	if d.take(n) == nil {
		return 0
	}
	return v
}

func (d *stateReader) uint64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *stateReader) byte() byte {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

// take consumes and returns the next n bytes, or fails (n <= 0 is a
// varint that did not decode) and returns nil.
func (d *stateReader) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n <= 0 || n > len(d.b) {
		d.fail("truncated")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
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

// bytes reads a length-prefixed byte string.
func (d *stateReader) bytes() []byte {
	n := d.count()
	if n == 0 {
		return nil
	}
	return d.take(n)
}
