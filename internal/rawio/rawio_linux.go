package rawio

import (
	"syscall"
	"unsafe"
)

// Write makes one write(2) of p to the non-blocking socket fd, again if
// a signal interrupts it. It returns what the socket took, or a negative
// count and the error (EAGAIN when the socket is full), as syscall.Write
// does.
func Write(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case 0:
			return int(n), nil
		case syscall.EINTR:
			continue
		default:
			return -1, e
		}
	}
}
