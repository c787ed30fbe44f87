//go:build !linux

package replica

import (
	"io"
	"net"
	"os"
	"syscall"
)

// fdatasync is f.Sync where the system has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }

func fdatasyncHeld(f *os.File) error { return f.Sync() }

func pwriteHeld(f *os.File, b []byte, off int64) error {
	_, err := f.WriteAt(b, off)
	return err
}

func sockWrite(fd uintptr, b []byte) (int, error) { return syscall.Write(int(fd), b) }

func newSockReader(c net.Conn) io.Reader { return c }
