package fencefile

import (
	"errors"
	"hash/crc32"
	"os"
	"time"
)

// Layout constants for tests that damage the file on purpose.
const (
	SlotStride = slotStride
	RecordSize = recordSize
)

// SetTick makes Keep wait for ticks on c instead of its ticker, so a test
// knows when a check ran: the second send on an unbuffered c returns only
// after the first check finished.
func SetTick(j *Journal, c <-chan time.Time) { j.tick = c }

// EncodeRecord returns the bytes of a slot, for tests that forge one.
func EncodeRecord(seq, limit, step uint64) []byte {
	b := record{seq: seq, limit: limit, step: step}.encode()
	return b[:]
}

// EncodeRecordVersion is EncodeRecord with another format version and a
// valid checksum.
func EncodeRecordVersion(seq, limit, step uint64, v uint32) []byte {
	b := record{seq: seq, limit: limit, step: step}.encode()
	b[4], b[5], b[6], b[7] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	sum := crc32.Checksum(b[:32], crcTab) // recompute over the changed header
	b[32], b[33], b[34], b[35] = byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum)
	return b[:]
}

// DurableLimit reads path without locking it and returns the highest limit
// held by a valid slot: what a restart would find on disk.
func DurableLimit(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var best uint64
	var errs []error
	for i := range 2 {
		r, err := readSlot(f, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		best = max(best, r.limit)
	}
	if len(errs) == 2 {
		return 0, errors.Join(errs...)
	}
	return best, nil
}

// BreakWrites swaps the journal's file for a read-only descriptor of the
// same file, so the next write fails as a full or failing disk would.
func BreakWrites(j *Journal) error {
	ro, err := os.Open(j.path)
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.f, ro = ro, j.f
	j.mu.Unlock()
	return ro.Close() // drops the lock: tests using this do not reopen
}

// WithRange sets how many fences each reservation adds (default
// DefaultRange); it must be > 0.
func WithRange(n uint64) Option { return func(j *Journal) { j.step = n } }

// WithInterval sets how often Keep checks for headroom (default
// DefaultInterval); it must be > 0.
func WithInterval(d time.Duration) Option { return func(j *Journal) { j.interval = d } }
