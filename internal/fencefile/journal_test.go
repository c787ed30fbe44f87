package fencefile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/latchd/latchd/internal/fencefile"
)

// openT opens the journal at path and closes it when the test ends.
func openT(t *testing.T, path string, opts ...fencefile.Option) *fencefile.Journal {
	t.Helper()
	j, err := fencefile.Open(path, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = j.Close() }) // a second Close is a no-op
	return j
}

func closeT(t *testing.T, j *fencefile.Journal) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestOpenNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.state")
	j := openT(t, path, fencefile.WithRange(100), fencefile.WithClockFloor(5000))
	if j.Seed() != 5000 || j.Limit() != 5100 || j.Recovered() != nil {
		t.Fatalf("new journal: Seed %d, Limit %d, Recovered %v; want 5000, 5100, nil", j.Seed(), j.Limit(), j.Recovered())
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600: the file is the server's alone", fi.Mode().Perm())
	}
	if d, err := fencefile.DurableLimit(path); err != nil || d != 5100 {
		t.Errorf("on disk: limit %d, %v; want 5100", d, err)
	}
}

func TestBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  fencefile.Option
	}{
		{name: "zero range", opt: fencefile.WithRange(0)},
		{name: "zero interval", opt: fencefile.WithInterval(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fence.state")
			j, err := fencefile.Open(path, tt.opt)
			if !errors.Is(err, fencefile.ErrBadOption) {
				if j != nil {
					_ = j.Close()
				}
				t.Fatalf("Open = %v, want ErrBadOption", err)
			}
		})
	}
}

func TestReserve(t *testing.T) {
	tests := []struct {
		name      string
		need      uint64
		wantLimit uint64
		wantDisk  uint64
	}{
		{name: "within limit is free", need: 1050, wantLimit: 1100, wantDisk: 1100},
		{name: "at limit is free", need: 1100, wantLimit: 1100, wantDisk: 1100},
		{name: "just past limit", need: 1101, wantLimit: 1201, wantDisk: 1201},
		{name: "far past limit", need: 9000, wantLimit: 9100, wantDisk: 9100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fence.state")
			j := openT(t, path, fencefile.WithRange(100), fencefile.WithClockFloor(1000))
			got, err := j.Reserve(tt.need)
			if err != nil || got != tt.wantLimit || j.Limit() != tt.wantLimit {
				t.Fatalf("Reserve(%d) = %d, %v (Limit %d); want %d", tt.need, got, err, j.Limit(), tt.wantLimit)
			}
			if d, err := fencefile.DurableLimit(path); err != nil || d != tt.wantDisk {
				t.Fatalf("on disk: limit %d, %v; want %d", d, err, tt.wantDisk)
			}
		})
	}
}

func TestReserveExhausted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.state")
	j, err := fencefile.Open(path, fencefile.WithRange(100), fencefile.WithClockFloor(^uint64(0)-50))
	if !errors.Is(err, fencefile.ErrExhausted) {
		if j != nil {
			_ = j.Close()
		}
		t.Fatalf("Open near the end of uint64 = %v, want ErrExhausted", err)
	}
}

func TestRestart(t *testing.T) {
	const step = 100
	tests := []struct {
		name     string
		floor    uint64 // the second start's clock floor
		wantSeed uint64
	}{
		// The first run ends with its durable limit at 1201.
		{name: "clock behind", floor: 0, wantSeed: 1201},
		{name: "clock stepped back", floor: 1150, wantSeed: 1201},
		{name: "clock ahead", floor: 1_000_000, wantSeed: 1_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fence.state")
			j := openT(t, path, fencefile.WithRange(step), fencefile.WithClockFloor(1000))
			if _, err := j.Reserve(1101); err != nil {
				t.Fatal(err)
			}
			closeT(t, j)

			j = openT(t, path, fencefile.WithRange(step), fencefile.WithClockFloor(tt.floor))
			if j.Seed() != tt.wantSeed || j.Limit() != tt.wantSeed+step || j.Recovered() != nil {
				t.Fatalf("after restart: Seed %d, Limit %d, Recovered %v; want %d, %d, nil",
					j.Seed(), j.Limit(), j.Recovered(), tt.wantSeed, tt.wantSeed+step)
			}
		})
	}
}

// TestDamagedSlots damages a journal whose slot 0 holds seq 2 (limit 1100)
// and slot 1 seq 3 (limit 1201), then reopens it. Whatever survives, the
// seed must be at or above 1201, every fence the old run could issue.
func TestDamagedSlots(t *testing.T) {
	const (
		step    = 100
		durable = 1201
	)
	flip := func(off int64) func(t *testing.T, f *os.File) {
		return func(t *testing.T, f *os.File) {
			var b [1]byte
			if _, err := f.ReadAt(b[:], off); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0x40
			if _, err := f.WriteAt(b[:], off); err != nil {
				t.Fatal(err)
			}
		}
	}
	truncate := func(size int64) func(t *testing.T, f *os.File) {
		return func(t *testing.T, f *os.File) {
			if err := f.Truncate(size); err != nil {
				t.Fatal(err)
			}
		}
	}
	write := func(off int64, b []byte) func(t *testing.T, f *os.File) {
		return func(t *testing.T, f *os.File) {
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
	}
	both := func(a, b func(*testing.T, *os.File)) func(*testing.T, *os.File) {
		return func(t *testing.T, f *os.File) { a(t, f); b(t, f) }
	}
	slot1 := int64(fencefile.SlotStride)
	tests := []struct {
		name          string
		damage        func(t *testing.T, f *os.File)
		wantErr       error
		wantErrText   string
		wantSeed      uint64
		wantRecovered bool
	}{
		{name: "intact", damage: func(*testing.T, *os.File) {}, wantSeed: durable},
		{name: "newest slot flipped", damage: flip(slot1 + 17), wantSeed: 1100 + 2*step, wantRecovered: true},
		{name: "older slot flipped", damage: flip(17), wantSeed: durable + 2*step, wantRecovered: true},
		{name: "checksum flipped", damage: flip(slot1 + 33), wantSeed: 1100 + 2*step, wantRecovered: true},
		{name: "magic flipped", damage: flip(slot1), wantSeed: 1100 + 2*step, wantRecovered: true},
		{
			name:   "torn write of the next record",
			damage: write(0, fencefile.EncodeRecord(4, 1302, step)[:20]),
			// the torn write never returned, so 1201 is exact; the margin is harmless
			wantSeed: durable + 2*step, wantRecovered: true,
		},
		{name: "truncated to slot 0", damage: truncate(fencefile.SlotStride), wantSeed: 1100 + 2*step, wantRecovered: true},
		{name: "truncated inside slot 1", damage: truncate(slot1 + 20), wantSeed: 1100 + 2*step, wantRecovered: true},
		{name: "truncated inside slot 0", damage: truncate(20), wantErr: fencefile.ErrCorrupt, wantErrText: "truncated"},
		{name: "both flipped", damage: both(flip(17), flip(slot1+17)), wantErr: fencefile.ErrCorrupt, wantErrText: "checksum mismatch"},
		{name: "zeroed", damage: both(write(0, make([]byte, fencefile.RecordSize)), write(slot1, make([]byte, fencefile.RecordSize))),
			wantErr: fencefile.ErrCorrupt, wantErrText: "empty"},
		{name: "newer format", damage: write(slot1, fencefile.EncodeRecordVersion(3, durable, step, 2)),
			wantErr: fencefile.ErrCorrupt, wantErrText: "newer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fence.state")
			j := openT(t, path, fencefile.WithRange(step), fencefile.WithClockFloor(1000))
			if _, err := j.Reserve(1101); err != nil {
				t.Fatal(err)
			}
			closeT(t, j)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			tt.damage(t, f)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}

			j, err = fencefile.Open(path, fencefile.WithRange(step))
			if tt.wantErr != nil {
				if j != nil {
					_ = j.Close()
				}
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantErrText) || !strings.Contains(err.Error(), path) {
					t.Fatalf("Open = %v; want %v naming %s and saying %q", err, tt.wantErr, path, tt.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if j.Seed() != tt.wantSeed || (j.Recovered() != nil) != tt.wantRecovered {
				t.Fatalf("Seed %d, Recovered %v; want %d, recovered %v", j.Seed(), j.Recovered(), tt.wantSeed, tt.wantRecovered)
			}
			// The first reservation rewrote both slots: the next start
			// finds a healthy file and loses no more numbers.
			limit := j.Limit()
			closeT(t, j)
			j = openT(t, path, fencefile.WithRange(step))
			if j.Seed() != limit || j.Recovered() != nil {
				t.Fatalf("after repair: Seed %d, Recovered %v; want %d, nil", j.Seed(), j.Recovered(), limit)
			}
		})
	}
}

func TestReserveAfterClose(t *testing.T) {
	j := openT(t, filepath.Join(t.TempDir(), "fence.state"), fencefile.WithRange(10))
	closeT(t, j)
	if _, err := j.Reserve(j.Limit() + 1); !errors.Is(err, fencefile.ErrClosed) {
		t.Fatalf("Reserve after Close = %v, want ErrClosed", err)
	}
}

func TestWriteFailureSticks(t *testing.T) {
	j := openT(t, filepath.Join(t.TempDir(), "fence.state"), fencefile.WithRange(10))
	before := j.Limit()
	if err := fencefile.BreakWrites(j); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Reserve(before + 1); err == nil {
		t.Fatal("Reserve on a read-only descriptor succeeded")
	}
	// Even a need within the old limit fails now: after a failed fsync
	// the page cache may hold data the disk never got.
	if _, err := j.Reserve(before); err == nil {
		t.Fatal("Reserve after a failed write succeeded")
	}
	if j.Limit() != before {
		t.Fatalf("Limit moved to %d after a failed write, want %d", j.Limit(), before)
	}
}
