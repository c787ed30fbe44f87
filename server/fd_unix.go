//go:build unix

package server

import "syscall"

// writeFd writes p to a non-blocking socket with one system call.
func writeFd(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
