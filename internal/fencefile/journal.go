package fencefile

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for Open's options.
const (
	// DefaultRange is how far one reservation runs ahead: about one fsync
	// a second at a million grants a second.
	DefaultRange = 1 << 20
	// DefaultInterval is how often Keep checks the engine's last fence.
	DefaultInterval = 50 * time.Millisecond
)

// Option adjusts Open.
type Option func(*Journal)

// WithClockFloor makes Seed at least ns. Pass time.Now().UnixNano(), so
// that a new journal still seeds above a previous clock-seeded run.
func WithClockFloor(ns uint64) Option { return func(j *Journal) { j.floor = ns } }

// Journal is an open, locked fence journal. Build it with Open.
type Journal struct {
	path     string
	step     uint64
	floor    uint64
	interval time.Duration
	tick     <-chan time.Time // tests replace Keep's ticker with this

	seed      uint64 // set by Open, then read-only
	recovered error  // set by Open, then read-only
	limit     atomic.Uint64

	mu     sync.Mutex // serialises writes; guards the fields below
	f      *os.File   // nil once closed
	cur    record     // newest record on disk; seq 0 before the first write
	failed error      // a write or fsync failed: the journal is unusable
}

// Open opens (creating it with mode 0600 if missing) and locks the journal
// at path, computes Seed and makes the first reservation, so Seed() <
// Limit() when it returns. It fails with ErrLocked or ErrCorrupt. Close
// releases the lock.
func Open(path string, opts ...Option) (*Journal, error) {
	j := &Journal{path: path, step: DefaultRange, interval: DefaultInterval}
	for _, o := range opts {
		o(j)
	}
	if j.step == 0 || j.interval <= 0 {
		return nil, fmt.Errorf("%w: range must be > 0 (got %d) and interval > 0 (got %v)", ErrBadOption, j.step, j.interval)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fencefile: open %s: %w", path, err)
	}
	if err := lockFile(f); err != nil {
		_ = f.Close() // the lock error is the one to report
		if errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("%w: %s: another latchd is using this --fence-state-file; two servers must not share one", ErrLocked, path)
		}
		return nil, fmt.Errorf("fencefile: lock %s: %w", path, err)
	}
	j.f = f
	if err := j.start(); err != nil {
		_ = f.Close() // releases the lock; err says what went wrong
		return nil, err
	}
	return j, nil
}

// start reads the locked file, sets the seed and makes the first
// reservation.
func (j *Journal) start() error {
	fi, err := j.f.Stat()
	if err != nil {
		return fmt.Errorf("fencefile: stat %s: %w", j.path, err)
	}
	// Only a zero-length file is new. The first record's fsync also makes
	// the file's size durable, so a crash before it leaves zero bytes and
	// no fence issued; anything else without a valid slot is refused.
	fresh := fi.Size() == 0
	if fresh {
		j.seed = j.floor
	} else if err := j.load(); err != nil {
		return err
	}
	if _, err := j.extendLocked(j.seed); err != nil { // j is not shared yet
		return err
	}
	if fresh {
		// The file's directory entry must be durable before any fence is
		// issued from it: a file that vanishes in a crash would let the
		// next start seed from the clock alone.
		return syncDir(filepath.Dir(j.path))
	}
	return nil
}

// load reads both slots of a non-empty file and sets seed, cur and
// recovered.
func (j *Journal) load() error {
	var recs [2]record
	var errs [2]error
	for i := range recs {
		recs[i], errs[i] = readSlot(j.f, i)
		if errors.Is(errs[i], errNewerVersion) {
			return fmt.Errorf("%w: %s slot %d: %v; run the newer latchd, or see docs/fencing.md", ErrCorrupt, j.path, i, errs[i])
		}
	}
	var base uint64
	switch {
	case errs[0] == nil && errs[1] == nil:
		// Writes alternate, so the higher seq is the newer record; taking
		// the higher limit as well costs nothing if a copy mixed them up.
		j.cur = recs[0]
		if recs[1].seq > recs[0].seq {
			j.cur = recs[1]
		}
		base = max(recs[0].limit, recs[1].limit)
		j.cur.limit = base
	case errs[0] == nil || errs[1] == nil:
		good, bad := 0, 1
		if errs[0] != nil {
			good, bad = 1, 0
		}
		j.cur = recs[good]
		// The lost slot may have held a newer record if it went bad after
		// its write returned (a torn write never did: no fence above the
		// surviving limit was issued while it was in flight). extend keeps
		// every unmirrored record within two of its predecessor's steps,
		// so this margin covers that record too.
		m, c1 := bits.Add64(j.cur.step, j.cur.step, 0)
		b, c2 := bits.Add64(j.cur.limit, m, 0)
		if c1|c2 != 0 {
			return fmt.Errorf("%w: %s: stored limit %d is too close to the end of uint64", ErrExhausted, j.path, j.cur.limit)
		}
		base = b
		j.recovered = fmt.Errorf("fencefile: %s slot %d is unusable (%v); seeded from slot %d (seq %d, limit %d) plus a margin of %d",
			j.path, bad, errs[bad], good, j.cur.seq, j.cur.limit, m)
	default:
		return fmt.Errorf("%w: %s: slot 0: %v; slot 1: %v. The last reserved fence is unknown, so latchd will not "+
			"start rather than risk reusing fence numbers. Do not restore an older copy (its limit is lower). Move the "+
			"file aside and restart: a new file seeds from the wall clock, which is safe only if the clock is now ahead "+
			"of every fence issued; see docs/fencing.md", ErrCorrupt, j.path, errs[0], errs[1])
	}
	j.seed = max(base, j.floor)
	j.limit.Store(j.cur.limit)
	return nil
}

// Seed returns the highest fence the previous user of the file could have
// issued (or the clock floor, if higher): the engine's FenceSeed.
func (j *Journal) Seed() uint64 { return j.seed }

// Limit returns the highest fence number made durable so far: the engine
// may issue fences up to it.
func (j *Journal) Limit() uint64 { return j.limit.Load() }

// Recovered describes the slot Open had to ignore, for a warning; nil if
// none.
func (j *Journal) Recovered() error { return j.recovered }

// Path returns the journal's file name.
func (j *Journal) Path() string { return j.path }

// Reserve makes every fence number up to at least need durable and
// returns the new limit: at once when need is within Limit, else by
// writing max(need, Limit()) + range with one fsync. After a failed write
// every later call fails too (the fsync may have dropped the data).
func (j *Journal) Reserve(need uint64) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return 0, ErrClosed
	}
	if j.failed != nil {
		return 0, j.failed
	}
	if need <= j.cur.limit {
		return j.cur.limit, nil
	}
	return j.extendLocked(need)
}

// extendLocked writes limit = max(base, current limit) + range. A jump of
// more than twice the previous record's step is written to both slots, so
// a fallback to the other never needs a bigger margin than Open adds.
func (j *Journal) extendLocked(base uint64) (uint64, error) {
	base = max(base, j.cur.limit)
	target, carry := bits.Add64(base, j.step, 0)
	if carry != 0 {
		return 0, fmt.Errorf("%w: %s: cannot reserve past %d", ErrExhausted, j.path, base)
	}
	jump := target - j.cur.limit
	mirror := j.cur.seq == 0 || jump > j.cur.step && jump-j.cur.step > j.cur.step
	next := record{seq: j.cur.seq + 1, limit: target, step: j.step}
	err := j.writeLocked(next)
	if err == nil && mirror {
		next.seq++
		err = j.writeLocked(next)
	}
	if err != nil {
		j.failed = fmt.Errorf("fencefile: write %s: %w", j.path, err)
		return 0, j.failed
	}
	j.cur = next
	j.limit.Store(target)
	return target, nil
}

// writeLocked writes r into its slot and waits for it to reach the disk.
func (j *Journal) writeLocked(r record) error {
	b := r.encode()
	if _, err := j.f.WriteAt(b[:], int64(slotOf(r.seq))*slotStride); err != nil {
		return err
	}
	return j.f.Sync()
}

// Close releases the lock and closes the file. Reserve fails afterwards.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close() // closing the last descriptor drops the flock
	j.f = nil
	return err
}

// EngineHooks returns what engine.Config needs: FenceSeed, FenceLimit and
// FenceReserve, which panics if the journal cannot write: it cannot refuse
// a grant, and a crash is safer than a fence that may be reused.
func (j *Journal) EngineHooks() (seed, limit uint64, reserve func(need uint64) uint64) {
	return j.Seed(), j.Limit(), func(need uint64) uint64 {
		l, err := j.Reserve(need)
		if err != nil {
			panic(fmt.Sprintf("fencefile: cannot reserve fence %d: %v; stopping rather than issue a fence that is not durable", need, err))
		}
		return l
	}
}

// syncDir fsyncs a directory, making a new entry in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err == nil {
		err = errors.Join(d.Sync(), d.Close())
	}
	if err != nil {
		return fmt.Errorf("fencefile: sync directory %s: %w", dir, err)
	}
	return nil
}
