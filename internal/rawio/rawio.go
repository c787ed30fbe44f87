// Package rawio writes to non-blocking sockets without the Go runtime's
// system-call bookkeeping where the system allows it.
//
// A write to a non-blocking socket never waits, so on Linux Write makes
// the raw write(2) call: the goroutine does not enter the runtime's
// system-call state, which would hand its processor off if the call ran
// long and, when every processor was idle, wake the runtime's monitor
// thread, which then polls every 20 µs while anything runs
// (docs/cluster.md, "Held system calls"). Elsewhere Write is
// syscall.Write (through the C library on macOS, the supported way).
package rawio
