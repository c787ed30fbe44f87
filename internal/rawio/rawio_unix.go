//go:build unix && !linux

package rawio

import "syscall"

// Write makes one write(2) of p to the non-blocking socket fd.
func Write(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
