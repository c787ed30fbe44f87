// Package budget is the server-wide bound on output buffered for clients:
// one counter of bytes that the TCP server (answers a client has not read
// yet) and the REST server (stats bodies not yet written) share, against
// one maximum. It only counts; each server decides what to do past it.
package budget

import "sync/atomic"

// Budget counts buffered output bytes against a maximum. Its methods are
// safe for concurrent use. A nil *Budget counts nothing and is never over.
type Budget struct {
	used atomic.Int64
	made atomic.Uint64
	max  int64
}

// New returns a budget of max bytes; max <= 0 means no maximum (the
// counter still counts).
func New(max int64) *Budget { return &Budget{max: max} }

// Add changes the count by n (negative to give bytes back) and returns the
// new count.
func (b *Budget) Add(n int64) int64 {
	if b == nil {
		return 0
	}
	if n > 0 {
		b.made.Add(uint64(n))
	}
	return b.used.Add(n)
}

// Made returns the bytes ever added: how much output was buffered since
// the start, most of it garbage once sent.
func (b *Budget) Made() uint64 {
	if b == nil {
		return 0
	}
	return b.made.Load()
}

// Used returns the bytes counted now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Max returns the maximum, 0 for none.
func (b *Budget) Max() int64 {
	if b == nil || b.max < 0 {
		return 0
	}
	return b.max
}

// Fits reports whether n more bytes stay within the maximum.
func (b *Budget) Fits(n int64) bool { return b.Max() == 0 || b.Used()+n <= b.max }
