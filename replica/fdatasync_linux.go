package replica

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync flushes f's data and the metadata needed to read it back (its
// size), not its timestamps: what a log write must have on disk before it
// is acknowledged. unix.Fdatasync returns EINTR as it gets it; like
// os.File.Sync, this retries it.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
