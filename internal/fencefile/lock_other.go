//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package fencefile

import (
	"errors"
	"os"
	"runtime"
)

var errWouldBlock = errors.New("fencefile: would block")

// lockFile fails: without flock(2) two servers could share one journal
// and issue the same fences, so the journal is not offered at all.
func lockFile(*os.File) error {
	return errors.New("fencefile: file locking is not supported on " + runtime.GOOS)
}
