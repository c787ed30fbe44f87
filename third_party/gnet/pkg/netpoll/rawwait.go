// Added by latchd to gnet v2.10.0 (not part of upstream gnet): see
// third_party/gnet/LATCHD.md.

package netpoll

import (
	"sync/atomic"
	"time"
)

var rawIdleWaitMs atomic.Int32

// SetRawIdleWait sets how long an event loop with nothing to do first
// waits for I/O in a raw epoll_pwait, which keeps its processor (P) the
// way a running goroutine does, before it blocks in an ordinary system
// call, whose processor the Go runtime's monitor may take away and hand
// to another thread. d is rounded up to whole milliseconds (the unit of
// epoll_pwait); 0 or less turns the raw wait off and the poller behaves
// as upstream gnet. It applies to every poller in the process from its
// next wait, and only on Linux with the default (epoll) poller.
func SetRawIdleWait(d time.Duration) {
	var ms int32
	if d > 0 {
		ms = 1000
		if d < time.Second {
			ms = int32((d + time.Millisecond - 1) / time.Millisecond)
		}
	}
	rawIdleWaitMs.Store(ms)
}

// RawIdleWait reports the setting of SetRawIdleWait, in whole milliseconds.
func RawIdleWait() time.Duration {
	return time.Duration(rawIdleWaitMs.Load()) * time.Millisecond
}
