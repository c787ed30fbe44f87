package replica

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// tcpPair is a connected loopback TCP pair.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}

// TestSockReaderReads: what the peer writes arrives whole and in order
// through the reader (in pieces, across waits for the socket), then
// io.EOF when the peer closes.
func TestSockReaderReads(t *testing.T) {
	a, b := tcpPair(t)
	r := newSockReader(b)
	want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: many reads
	go func() {
		for p := want; len(p) > 0; {
			n := min(len(p), 100_000)
			if _, err := a.Write(p[:n]); err != nil {
				return
			}
			p = p[n:]
			time.Sleep(time.Millisecond) // the reader finds the socket empty and waits
		}
		_ = a.Close()
	}()
	got, err := io.ReadAll(bufio.NewReaderSize(r, 4096))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d, or different bytes", len(got), len(want))
	}
	n, err := r.Read(make([]byte, 8))
	if n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed = %d, %v; want 0, EOF", n, err)
	}
}

// TestSockReaderDeadlineAndClose: a read deadline and a Close end a read
// that waits, as they do for the connection's own Read.
func TestSockReaderDeadlineAndClose(t *testing.T) {
	_, b := tcpPair(t)
	r := newSockReader(b)
	_ = b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := r.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline = %v", err)
	}
	_ = b.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond) // let it park
	_ = b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read of a closed connection = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting Read")
	}
}

// TestHeldFileWrites: pwriteHeld and fdatasyncHeld write and sync like
// WriteAt and fdatasync, with one processor (where they do not hold it)
// and with more, and report a closed file's error.
func TestHeldFileWrites(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		f, err := os.Create(filepath.Join(t.TempDir(), "f"))
		if err != nil {
			t.Fatal(err)
		}
		if err := pwriteHeld(f, []byte("world"), 6); err != nil {
			t.Fatal(err)
		}
		if err := pwriteHeld(f, []byte("hello "), 0); err != nil {
			t.Fatal(err)
		}
		if err := fdatasyncHeld(f); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f.Name())
		if err != nil || string(got) != "hello world" {
			t.Fatalf("GOMAXPROCS %d: file holds %q (%v)", procs, got, err)
		}
		_ = f.Close()
		if err := pwriteHeld(f, []byte("x"), 0); err == nil {
			t.Fatalf("GOMAXPROCS %d: pwriteHeld to a closed file succeeded", procs)
		}
		if err := fdatasyncHeld(f); err == nil {
			t.Fatalf("GOMAXPROCS %d: fdatasyncHeld of a closed file succeeded", procs)
		}
	}
}

// TestWALHeldStoreGetReopen: a WAL that holds its syncs stores and reads
// back exactly as one that does not, across segments and a reopen.
func TestWALHeldStoreGetReopen(t *testing.T) {
	w := openWAL(t, t.TempDir(), 1024)
	if w.Held() {
		t.Fatal("a new WAL holds its syncs")
	}
	w.SetHeld(true)
	if !w.Held() {
		t.Fatal("SetHeld(true) did not take")
	}
	for i := uint64(1); i <= 300; i += 10 {
		if err := w.StoreLogs(walLogs(i, i+9, 0)); err != nil {
			t.Fatal(err)
		}
	}
	checkWAL(t, w, 1, 300, gen0)
	w = reopenWAL(t, w, 1024)
	checkWAL(t, w, 1, 300, gen0)
	var nilWAL *WAL
	nilWAL.SetHeld(true) // a node without a WAL
	if nilWAL.Held() {
		t.Fatal("a nil WAL holds")
	}
}
