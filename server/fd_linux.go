package server

import (
	"syscall"
	"unsafe"
)

// writeFd writes p to a non-blocking socket with one write(2). The call
// cannot block, so it skips the runtime's system-call state: no hand-off
// of the processor, and no wake-up of the runtime's monitor thread when
// everything was idle (replica's sysio_linux.go says why that matters).
func writeFd(fd int, p []byte) (int, error) {
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
