//go:build unix

package server

import "syscall"

// writeFd makes one write(2) of p to a non-blocking socket, again if a
// signal interrupts it. It returns what the socket took, or a negative
// count and the error (EAGAIN when the socket is full).
func writeFd(fd int, p []byte) (int, error) {
	for {
		n, err := syscall.Write(fd, p)
		if err != syscall.EINTR {
			return n, err
		}
	}
}
