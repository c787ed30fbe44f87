//go:build !linux

package replica

import (
	"io"
	"net"
	"os"
)

// fdatasync is f.Sync where the system has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }

func fdatasyncHeld(f *os.File) error { return f.Sync() }

func pwriteHeld(f *os.File, b []byte, off int64) error {
	_, err := f.WriteAt(b, off)
	return err
}

func newSockReader(c net.Conn) io.Reader { return c }
