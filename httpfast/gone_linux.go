package httpfast

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// canWatch: peerGone works here.
const canWatch = true

// peerGone reports whether the client behind rc closed its connection
// (or shut down its sending side, or reset it), without reading from it.
func peerGone(rc syscall.RawConn) bool {
	gone := false
	err := rc.Control(func(fd uintptr) {
		p := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(p[:], 0)
		gone = err == nil && n > 0 && p[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
	})
	return err != nil || gone
}
