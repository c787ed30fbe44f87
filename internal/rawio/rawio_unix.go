//go:build unix && !linux

package rawio

import "syscall"

// Write makes one write(2) of p to the non-blocking socket fd, again if
// a signal interrupts it.
func Write(fd int, p []byte) (int, error) {
	for {
		n, err := syscall.Write(fd, p)
		if err != syscall.EINTR {
			return n, err
		}
	}
}
