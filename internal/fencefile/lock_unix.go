//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fencefile

import (
	"errors"
	"os"
	"syscall"
)

// errWouldBlock is what lockFile returns when another holder has the lock.
var errWouldBlock = syscall.EWOULDBLOCK

// lockFile takes an exclusive flock(2) on f without waiting. The lock
// belongs to the open file description, so a second Open in this process
// conflicts too, and it goes away with the process, however it dies.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
