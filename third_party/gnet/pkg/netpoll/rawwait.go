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
// of a goroutine that has run for 10 ms, which comes 10-20 ms into an
// idle spell; a stop for the garbage collector); the rest of that idle
// spell then waits in the ordinary call, so an idle loop gives its
// processor back. Off (the default), the poller behaves as upstream gnet.
// Only Linux's default (epoll) poller has it; elsewhere the setting is
// stored and ignored.
//
// It relies on the runtime's preemption signal reaching the loop's
// thread: not with GODEBUG=asyncpreemptoff=1, nor in a process that
// ignores SIGURG (signal.Ignore), where a raw wait would end only at the
// next I/O, and a garbage collection, stopping every goroutine, would wait
// for it. While a loop is in a raw wait its processor runs nothing else:
// goroutines and timers queued on it wait for another processor to steal
// them, or for the wait to end.
func SetRawIdleWait(on bool) { rawIdleWait.Store(on) }

// RawIdleWait reports the setting of SetRawIdleWait.
func RawIdleWait() bool { return rawIdleWait.Load() }
