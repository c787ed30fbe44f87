package replica

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// walLog is entry i of the test logs: its bytes depend on i and on gen, so
// an entry rewritten after a truncation can be told from the old one.
func walLog(i uint64, gen byte) walRecord {
	return walRecord{Index: i, Term: 1 + i/50, Data: bytes.Repeat([]byte{byte(i), gen}, 1+int(i%40))}
}

func walLogs(from, to uint64, gen byte) []walRecord {
	var logs []walRecord
	for i := from; i <= to; i++ {
		logs = append(logs, walLog(i, gen))
	}
	return logs
}

// checkWAL asserts w holds exactly first..last, entry i of generation
// gen(i).
func checkWAL(t *testing.T, w *WAL, first, last uint64, gen func(uint64) byte) {
	t.Helper()
	if f := w.FirstIndex(); f != first {
		t.Fatalf("first index %d, want %d", f, first)
	}
	if l := w.LastIndex(); l != last {
		t.Fatalf("last index %d, want %d", l, last)
	}
	for i := first; i <= last && first != 0; i++ {
		l, err := w.Get(i)
		if err != nil {
			t.Fatalf("Get(%d): %v", i, err)
		}
		want := walLog(i, gen(i))
		if l.Index != i || l.Term != want.Term || !bytes.Equal(l.Data, want.Data) {
			t.Fatalf("Get(%d) = %+v, want %+v", i, l, want)
		}
	}
	for _, i := range []uint64{first - 1, last + 1} {
		if i == 0 {
			continue
		}
		if _, err := w.Get(i); !errors.Is(err, errNoRecord) {
			t.Fatalf("Get(%d) outside %d-%d: %v", i, first, last, err)
		}
	}
}

func gen0(uint64) byte { return 0 }

func openWAL(t *testing.T, dir string, seg int64) *WAL {
	t.Helper()
	w, err := OpenWAL(dir, seg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func reopenWAL(t *testing.T, w *WAL, seg int64) *WAL {
	t.Helper()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return openWAL(t, w.dir, seg)
}

func segmentCount(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+walExt))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

func TestWALStoreGetReopen(t *testing.T) {
	w := openWAL(t, t.TempDir(), 1024) // small segments: many files
	checkWAL(t, w, 0, 0, gen0)
	if err := w.Append(walLogs(1, 60, 0)); err != nil {
		t.Fatal(err)
	}
	if err := w.Append([]walRecord{walLog(61, 0)}); err != nil {
		t.Fatal(err)
	}
	for i := uint64(62); i <= 300; i += 10 {
		if err := w.Append(walLogs(i, i+9, 0)); err != nil {
			t.Fatal(err)
		}
	}
	checkWAL(t, w, 1, 301, gen0)
	if n := segmentCount(t, w.dir); n < 5 {
		t.Fatalf("%d segments for 301 entries in 1 KiB segments", n)
	}
	w = reopenWAL(t, w, 1024)
	checkWAL(t, w, 1, 301, gen0)

	// Entries must follow the last one, and each other.
	if err := w.Append(walLogs(301, 302, 0)); err == nil {
		t.Fatal("an entry that repeats the last one was stored")
	}
	bad := walLogs(302, 304, 0)
	bad[1].Index = 310
	if err := w.Append(bad); err == nil {
		t.Fatal("entries out of order were stored")
	}
	checkWAL(t, w, 1, 301, gen0)
}

func TestWALDeleteRange(t *testing.T) {
	w := openWAL(t, t.TempDir(), 1024)
	for i := uint64(1); i <= 200; i += 20 {
		if err := w.Append(walLogs(i, i+19, 0)); err != nil {
			t.Fatal(err)
		}
	}
	before := segmentCount(t, w.dir)
	// Compaction: a prefix. Whole segments below go from disk.
	if err := w.DeleteRange(1, 120); err != nil {
		t.Fatal(err)
	}
	checkWAL(t, w, 121, 200, gen0)
	if after := segmentCount(t, w.dir); after >= before {
		t.Fatalf("segments %d before compaction, %d after", before, after)
	}
	// A follower's conflicting tail: cut, then rewritten by a new leader.
	if err := w.DeleteRange(151, 200); err != nil {
		t.Fatal(err)
	}
	checkWAL(t, w, 121, 150, gen0)
	if err := w.Append(walLogs(151, 170, 1)); err != nil {
		t.Fatal(err)
	}
	gen := func(i uint64) byte {
		if i > 150 {
			return 1
		}
		return 0
	}
	checkWAL(t, w, 121, 170, gen)
	// Nothing can be cut out of the middle.
	if err := w.DeleteRange(130, 140); err == nil {
		t.Fatal("a range inside the log was deleted")
	}
	// After a restart the compacted entries that shared a segment with
	// kept ones may be back; never a rewritten one's old bytes.
	w = reopenWAL(t, w, 1024)
	first := w.FirstIndex()
	if first > 121 || first < 1 {
		t.Fatalf("first index %d after reopen", first)
	}
	checkWAL(t, w, first, 170, gen)

	// Everything (a snapshot install): the next entry may start anywhere.
	if err := w.DeleteRange(first, 170); err != nil {
		t.Fatal(err)
	}
	checkWAL(t, w, 0, 0, gen0)
	if n := segmentCount(t, w.dir); n != 0 {
		t.Fatalf("%d segments left after deleting everything", n)
	}
	if err := w.Append(walLogs(5000, 5009, 2)); err != nil {
		t.Fatal(err)
	}
	w = reopenWAL(t, w, 1024)
	checkWAL(t, w, 5000, 5009, func(uint64) byte { return 2 })
}

// A write past a gap (raft does so only after a snapshot install that
// covers it) drops what came before, even if the clearing was lost in a
// crash.
func TestWALGapClears(t *testing.T) {
	w := openWAL(t, t.TempDir(), 1024)
	if err := w.Append(walLogs(1, 50, 0)); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(walLogs(80, 90, 1)); err != nil {
		t.Fatal(err)
	}
	one := func(uint64) byte { return 1 }
	checkWAL(t, w, 80, 90, one)
	w = reopenWAL(t, w, 1024)
	checkWAL(t, w, 80, 90, one)
}

// A write that never completed (the process died in it) is cut off at the
// next start; everything acknowledged before it stays.
func TestWALTornTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(data []byte, lastOff int) []byte
	}{
		{"half a record", func(d []byte, off int) []byte { return d[:off+(len(d)-off)/2] }},
		{"header only", func(d []byte, off int) []byte { return d[:off+walHeaderSize-3] }},
		{"zeros after", func(d []byte, off int) []byte { return append(d, make([]byte, 4096)...) }},
		{"garbage after", func(d []byte, off int) []byte { return append(d, "not a record at all"...) }},
		{"half a record, then preallocated zeros", func(d []byte, off int) []byte {
			return append(d[:off+(len(d)-off)/2], make([]byte, walPrealloc)...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := openWAL(t, t.TempDir(), 0)
			if err := w.Append(walLogs(1, 20, 0)); err != nil {
				t.Fatal(err)
			}
			if err := w.Append(walLogs(21, 21, 0)); err != nil {
				t.Fatal(err)
			}
			seg := w.segs[0]
			lastOff := int(seg.offs[20])
			end := seg.size // the file goes on with preallocated zeros
			name := seg.f.Name()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(name, tc.damage(data[:end], lastOff), 0o600); err != nil {
				t.Fatal(err)
			}
			w = openWAL(t, w.dir, 0)
			if tc.name != "zeros after" && w.Cut() == 0 {
				t.Error("Cut() = 0 after cutting a torn write")
			}
			last := uint64(20)
			if tc.name == "zeros after" || tc.name == "garbage after" {
				last = 21 // the damage was past the last record
			}
			checkWAL(t, w, 1, last, gen0)
			// The cut is on disk, and the log goes on from it.
			if err := w.Append(walLogs(last+1, last+5, 3)); err != nil {
				t.Fatal(err)
			}
			w = reopenWAL(t, w, 0)
			checkWAL(t, w, 1, last+5, func(i uint64) byte {
				if i > last {
					return 3
				}
				return 0
			})
		})
	}
}

// A whole last record (no blank part) with a bad checksum is damage, not
// a write that a crash cut short: it may hold an acknowledged entry that
// the commit index has not caught up with. Open refuses, naming the file
// and the offset, and changes nothing.
func TestWALWholeLastRecordDamagedRefuses(t *testing.T) {
	dir := t.TempDir()
	w := openWAL(t, dir, 0)
	if err := w.Append(walLogs(1, 21, 7)); err != nil { // gen 7: no record ends in a zero
		t.Fatal(err)
	}
	seg := w.segs[0]
	last, end, name := int(seg.offs[20]), int(seg.size), seg.f.Name()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	data[(last+walHeaderSize+end)/2] ^= 0x01
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = OpenWAL(dir, 0)
	if !errors.Is(err, errWALCorrupt) || !strings.Contains(err.Error(), name) ||
		!strings.Contains(err.Error(), fmt.Sprint("byte ", last)) {
		t.Fatalf("open with the last record damaged: %v; want a refusal naming %s and byte %d", err, name, last)
	}
	if after, _ := os.ReadFile(name); !bytes.Equal(after, data) {
		t.Fatal("the damaged segment changed")
	}
}

// Damage anywhere but the tail of the newest segment cannot be a torn
// write: Open refuses rather than serve a log with a hole in it.
func TestWALCorruptionRefuses(t *testing.T) {
	fill := func(t *testing.T) (string, []string) {
		dir := t.TempDir()
		w, err := OpenWAL(dir, 512)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= 100; i += 10 {
			if err := w.Append(walLogs(i, i+9, 0)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		names, err := filepath.Glob(filepath.Join(dir, "*"+walExt))
		if err != nil || len(names) < 3 {
			t.Fatalf("segments %v, %v", names, err)
		}
		slices.Sort(names)
		return dir, names
	}
	t.Run("older segment damaged", func(t *testing.T) {
		dir, names := fill(t)
		data, _ := os.ReadFile(names[0])
		data[len(data)/2] ^= 0x55
		if err := os.WriteFile(names[0], data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenWAL(dir, 512); !errors.Is(err, errWALCorrupt) {
			t.Fatalf("open with a damaged older segment: %v", err)
		}
	})
	t.Run("segment missing", func(t *testing.T) {
		dir, names := fill(t)
		if err := os.Remove(names[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenWAL(dir, 512); !errors.Is(err, errWALCorrupt) {
			t.Fatalf("open with a segment missing: %v", err)
		}
	})
}

// Readers run beside the writer, compaction and truncation (go test -race).
func TestWALConcurrentReads(t *testing.T) {
	w := openWAL(t, t.TempDir(), 4096)
	if err := w.Append(walLogs(1, 10, 0)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				first := w.FirstIndex()
				last := w.LastIndex()
				for i := first; i <= last && first > 0; i++ {
					l, err := w.Get(i)
					if err != nil && !errors.Is(err, errNoRecord) {
						t.Errorf("Get(%d): %v", i, err)
						return
					}
					if err == nil && (l.Index != i || len(l.Data) != len(walLog(i, 0).Data)) {
						t.Errorf("Get(%d) = %+v", i, l)
						return
					}
				}
			}
		})
	}
	next := uint64(11)
	for round := range 200 {
		if err := w.Append(walLogs(next, next+9, 0)); err != nil {
			t.Fatal(err)
		}
		next += 10
		switch round % 10 {
		case 3:
			first := w.FirstIndex()
			if err := w.DeleteRange(first, next-50); err != nil {
				t.Fatal(err)
			}
		case 7:
			if err := w.DeleteRange(next-5, next-1); err != nil {
				t.Fatal(err)
			}
			next -= 5
		}
	}
	close(stop)
	wg.Wait()
	checkWAL(t, w, mustFirst(t, w), next-1, gen0)
}

func mustFirst(t *testing.T, w *WAL) uint64 {
	t.Helper()
	return w.FirstIndex()
}

// A malformed batch past a gap is refused before the gap clears the log.
func TestWALBadBatchClearsNothing(t *testing.T) {
	w := openWAL(t, t.TempDir(), 0)
	if err := w.Append(walLogs(1, 10, 0)); err != nil {
		t.Fatal(err)
	}
	bad := walLogs(50, 52, 0)
	bad[2].Index = 60
	if err := w.Append(bad); err == nil {
		t.Fatal("a batch out of order was stored")
	}
	checkWAL(t, w, 1, 10, gen0)
}

func BenchmarkWALAppend(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprint("batch=", n), func(b *testing.B) {
			w, err := OpenWAL(b.TempDir(), 0)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			logs := walLogs(1, uint64(n), 0)
			b.ReportAllocs()
			for b.Loop() {
				if err := w.Append(logs); err != nil {
					b.Fatal(err)
				}
				for _, l := range logs {
					l.Index += uint64(n)
				}
			}
		})
	}
}
