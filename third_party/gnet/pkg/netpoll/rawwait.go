// Added by latchd to gnet v2.10.0 (not part of upstream gnet): see
// third_party/gnet/LATCHD.md.

package netpoll

import "sync/atomic"

var rawIdleWait atomic.Bool

// SetRawIdleWait turns the raw idle wait on or off for every poller in
// the process, from its next wait. On, an event loop with nothing to do
// waits for I/O in a raw epoll_pwait, which keeps its processor (P) the
// way a running goroutine does, instead of an ordinary system call, whose
// processor the Go runtime's monitor (sysmon) may take away and hand to
// another thread. The raw wait has no timeout: it lasts until I/O or a
// task arrives, or until a signal interrupts it (the runtime's preemption
// of a goroutine that has run for 10 ms, a stop for the garbage
// collector); the rest of that idle spell then waits in the ordinary
// call, so an idle loop gives its processor back. Off (the default), the
// poller behaves as upstream gnet. Only Linux's default (epoll) poller
// has it; elsewhere the setting is stored and ignored.
func SetRawIdleWait(on bool) { rawIdleWait.Store(on) }

// RawIdleWait reports the setting of SetRawIdleWait.
func RawIdleWait() bool { return rawIdleWait.Load() }
