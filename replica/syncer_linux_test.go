package replica

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
)

// aioSyncer is a syncer on AIO, or skips the test where the kernel or a
// sandbox refuses it (the syncer then uses fdatasync, tested below).
func aioSyncer(t testing.TB) *syncer {
	t.Helper()
	s := newSyncer()
	t.Cleanup(s.close)
	if !s.async() {
		t.Skip("no Linux AIO here (io_setup refused, or a 32-bit system)")
	}
	return s
}

func tempFile(t testing.TB) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestSyncerFlushes(t *testing.T) {
	s := aioSyncer(t)
	f := tempFile(t)
	for i := range 200 {
		if _, err := f.WriteAt([]byte("entry"), int64(i*5)); err != nil {
			t.Fatal(err)
		}
		if err := s.sync(f); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if !s.async() {
		t.Fatal("a working flush turned AIO off")
	}
	b, err := os.ReadFile(f.Name())
	if err != nil || len(b) != 1000 {
		t.Fatalf("read back %d bytes, %v", len(b), err)
	}
}

// A closed file: io_submit refuses it (EBADF), the plain fdatasync says
// so too, and AIO stays on.
func TestSyncerClosedFile(t *testing.T) {
	s := aioSyncer(t)
	f := tempFile(t)
	_ = f.Close()
	err := s.sync(f)
	if !errors.Is(err, unix.EBADF) {
		t.Fatalf("sync of a closed file: %v, want EBADF", err)
	}
	if !s.async() {
		t.Fatal("EBADF turned AIO off")
	}
	if err := s.sync(tempFile(t)); err != nil {
		t.Fatalf("next sync: %v", err)
	}
}

// A request io_submit does not take is flushed with fdatasync; EAGAIN
// (or ENOMEM) leaves AIO on, EPERM (a seccomp profile) turns it off.
func TestSyncerSubmitRefused(t *testing.T) {
	for _, c := range []struct {
		e      unix.Errno
		stayOn bool
	}{{unix.EAGAIN, true}, {unix.ENOMEM, true}, {unix.EPERM, false}, {unix.ENOSYS, false}} {
		t.Run(c.e.Error(), func(t *testing.T) {
			s := aioSyncer(t)
			f := tempFile(t)
			real := aioSubmit
			calls := 0
			aioSubmit = func(uintptr, *[1]*aioCB) unix.Errno { calls++; return c.e }
			defer func() { aioSubmit = real }()
			if _, err := f.WriteAt([]byte("x"), 0); err != nil {
				t.Fatal(err)
			}
			if err := s.sync(f); err != nil {
				t.Fatalf("sync: %v, want the plain fdatasync's nil", err)
			}
			if calls != 1 {
				t.Fatalf("io_submit tried %d times, want once (no spinning)", calls)
			}
			if s.async() != c.stayOn {
				t.Fatalf("AIO on after %v: %v, want %v", c.e, s.async(), c.stayOn)
			}
			aioSubmit = real
			if err := s.sync(f); err != nil {
				t.Fatalf("next sync: %v", err)
			}
		})
	}
}

// A file with no AIO fsync (here a /proc file, which has no fsync at
// all) turns AIO off for good, and the flush is fdatasync's.
func TestSyncerFallsBack(t *testing.T) {
	s := aioSyncer(t)
	p, err := os.Open("/proc/self/stat")
	if err != nil {
		t.Skip(err)
	}
	defer p.Close()
	want := unix.Fdatasync(int(p.Fd()))
	if err := s.sync(p); !errors.Is(err, want) || want == nil {
		t.Fatalf("sync of /proc/self/stat: %v, want fdatasync's %v", err, want)
	}
	if s.async() {
		t.Fatal("AIO still on after EINVAL")
	}
	if err := s.sync(tempFile(t)); err != nil {
		t.Fatalf("fdatasync after the fallback: %v", err)
	}
}

func TestSyncerClose(t *testing.T) {
	s := aioSyncer(t)
	s.close()
	s.close() // twice is fine
	if s.async() {
		t.Fatal("async after close")
	}
	if err := s.sync(tempFile(t)); err != nil {
		t.Fatalf("sync after close: %v", err)
	}
}

func TestSyncerConcurrent(t *testing.T) {
	s := aioSyncer(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		f := tempFile(t)
		wg.Go(func() {
			for i := range 50 {
				if _, err := f.WriteAt([]byte{byte(i)}, int64(i)); err != nil {
					errs <- err
					return
				}
				if err := s.sync(f); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestSyncerAllocs(t *testing.T) {
	s := aioSyncer(t)
	f := tempFile(t)
	if a := testing.AllocsPerRun(100, func() {
		if err := s.sync(f); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%.1f allocations per sync, want 0", a)
	}
}

// A WAL that is not held (a leader's) flushes through AIO; a held one
// (a follower's) never makes the syncer.
func TestWALSyncsThroughAIO(t *testing.T) {
	if !newSyncerWorks(t) {
		t.Skip("no Linux AIO here")
	}
	dir := t.TempDir()
	w, err := OpenWAL(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	if w.sync == nil || !w.sync.async() {
		t.Fatal("the leader's WAL does not sync through AIO")
	}
	s := w.sync
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if s.async() {
		t.Fatal("Close left the AIO context open")
	}
	w, err = OpenWAL(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var l raft.Log
	if err := w.GetLog(1, &l); err != nil || string(l.Data) != "a" {
		t.Fatalf("after reopen: %q, %v", l.Data, err)
	}
	w.SetHeld(true)
	if err := w.StoreLogs([]*raft.Log{{Index: 2, Term: 1, Data: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	if w.sync != nil {
		t.Fatal("a held WAL made a syncer")
	}
}

func newSyncerWorks(t *testing.T) bool {
	s := newSyncer()
	defer s.close()
	return s.async()
}

func BenchmarkSync(b *testing.B) {
	f := tempFile(b)
	buf := make([]byte, 4096)
	for _, c := range []struct {
		name string
		sync func(*os.File) error
	}{
		{"fdatasync", fdatasync},
		{"aio", nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.sync == nil {
				c.sync = aioSyncer(b).sync // skips where there is no AIO
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := f.WriteAt(buf, int64(i%256)*4096); err != nil {
					b.Fatal(err)
				}
				if err := c.sync(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
