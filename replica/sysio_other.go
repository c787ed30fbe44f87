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

// syncer is fdatasync where there is no Linux AIO.
type syncer struct{}

func newSyncer() *syncer                { return &syncer{} }
func (s *syncer) async() bool           { return false }
func (s *syncer) sync(f *os.File) error { return fdatasync(f) }
func (s *syncer) close()                {}
