//go:build unix && !linux

package server

import "syscall"

// writeFd writes p to a non-blocking socket with one system call (through
// the system's C library where that is the supported way: fd_linux.go
// makes the raw call).
func writeFd(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
