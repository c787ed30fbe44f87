//go:build unix

package server

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// TestWriteFd: one write(2) to a non-blocking socket: what fits is
// written and arrives, a full socket answers EAGAIN at once (n < 0, as
// writeClaimed expects), an empty line writes nothing.
func TestWriteFd(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	if n, err := writeFd(fds[0], nil); n != 0 || err != nil {
		t.Fatalf("writeFd(empty) = %d, %v", n, err)
	}
	if n, err := writeFd(fds[0], []byte("ok 5 30\n")); n != 8 || err != nil {
		t.Fatalf("writeFd = %d, %v", n, err)
	}
	buf := make([]byte, 64)
	if n, err := syscall.Read(fds[1], buf); err != nil || string(buf[:n]) != "ok 5 30\n" {
		t.Fatalf("read %q, %v", buf[:max(n, 0)], err)
	}
	chunk := bytes.Repeat([]byte{'x'}, 64<<10)
	sent := 0
	for i := 0; ; i++ {
		n, err := writeFd(fds[0], chunk)
		if err != nil {
			if n >= 0 || !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("a full socket: writeFd = %d, %v; want a negative count and EAGAIN", n, err)
			}
			break
		}
		sent += n
		if i > 10_000 {
			t.Fatal("the socket never filled")
		}
	}
	if sent == 0 {
		t.Fatal("nothing written to an empty socket")
	}
	_ = syscall.Close(fds[0])
	fds[0] = -1
	if n, err := writeFd(-1, []byte("x")); n >= 0 || !errors.Is(err, syscall.EBADF) {
		t.Fatalf("writeFd(-1) = %d, %v; want EBADF", n, err)
	}
}
