package fencefile

import "errors"

var (
	// ErrLocked means another process (or another Journal in this one)
	// holds the file: two servers must never issue fences from one journal.
	ErrLocked = errors.New("fencefile: journal is locked by another process")
	// ErrCorrupt means no slot of the file holds a valid record, so the
	// last reserved limit is unknown and starting could reuse fences.
	ErrCorrupt = errors.New("fencefile: journal is corrupt")
	// ErrExhausted means the next limit would overflow uint64.
	ErrExhausted = errors.New("fencefile: fence numbers exhausted")
	// ErrClosed is returned by Reserve after Close.
	ErrClosed = errors.New("fencefile: journal is closed")
	// ErrBadOption reports an option out of range.
	ErrBadOption = errors.New("fencefile: bad option")
)
