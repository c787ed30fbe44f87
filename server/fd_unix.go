//go:build unix

package server

import "github.com/latchd/latchd/internal/rawio"

// writeFd writes p to a non-blocking socket with one system call.
func writeFd(fd int, p []byte) (int, error) { return rawio.Write(fd, p) }
