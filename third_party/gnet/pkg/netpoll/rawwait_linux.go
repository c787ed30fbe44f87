// Added by latchd to gnet v2.10.0 (not part of upstream gnet): see
// third_party/gnet/LATCHD.md.

//go:build linux

package netpoll

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawEpollWait is epoll_pwait without telling the Go scheduler: the
// goroutine keeps its processor for the whole wait, so the runtime's
// monitor never retakes it (see SetRawIdleWait). msec is 0 (a poll) or
// -1 (until I/O or a signal). On an error it returns -1 and the errno.
func rawEpollWait(epfd int, events []unix.EpollEvent, msec int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd),
		uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), uintptr(msec), 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// rawWrite is write(2) without telling the Go scheduler, for the
// poller's non-blocking eventfd.
func rawWrite(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}
