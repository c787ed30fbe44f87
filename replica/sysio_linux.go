package replica

import (
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls on a follower's commit path (read the leader's
// message, write the entry, fdatasync, write the ack, write the commit
// index) leave the Go runtime's system-call state alone where they can.
// Entering it wakes the runtime's monitor thread (sysmon) whenever every
// processor was idle, and a woken monitor polls every 20 µs for as long
// as any goroutine runs: about ten sleeps and wake-ups per commit on a
// follower that idles between entries, a quarter of its CPU on a 2-core
// machine (docs/cluster.md, "Held system calls").

// fdatasync flushes f's data and the metadata needed to read it back (its
// size), not its timestamps. It gives up the processor while it waits.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

// canHold reports whether a blocking call may keep its processor: never
// when it is the only one (nothing else would run meanwhile), nor when
// this process runs several nodes (their goroutines would wait on
// another node's sync).
func canHold() bool { return liveNodes.Load() <= 1 && runtime.GOMAXPROCS(0) > 1 }

// fdatasyncHeld is fdatasync keeping the processor (and the monitor
// asleep) for the call; see WAL.SetHeld for who may.
func fdatasyncHeld(f *os.File) error {
	if !canHold() {
		return fdatasync(f)
	}
	fd := f.Fd()
	for {
		_, _, e := unix.RawSyscall(unix.SYS_FDATASYNC, fd, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: e}
		}
	}
}

// rawPwrite: pwrite64's offset is one register on 64-bit systems only
// (32-bit ARM and MIPS pass it in a pair after a padding slot).
const rawPwrite = unsafe.Sizeof(uintptr(0)) == 8

// pwriteHeld writes all of b at off keeping the processor: the write
// goes to the page cache, and the caller syncs it.
func pwriteHeld(f *os.File, b []byte, off int64) error {
	if !rawPwrite || !canHold() {
		_, err := f.WriteAt(b, off)
		return err
	}
	fd := f.Fd()
	for len(b) > 0 {
		n, _, e := unix.RawSyscall6(unix.SYS_PWRITE64, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(off), 0, 0)
		switch e {
		case 0:
		case unix.EINTR:
			continue
		default:
			return &os.PathError{Op: "write", Path: f.Name(), Err: e}
		}
		if n == 0 {
			return &os.PathError{Op: "write", Path: f.Name(), Err: io.ErrShortWrite}
		}
		b = b[n:]
		off += int64(n)
	}
	return nil
}

// sockReader reads a TCP connection with read(2) calls that need no
// system-call state (the socket is non-blocking; an empty one parks the
// goroutine in the runtime's poller, as net.Conn.Read does). Deadlines
// and Close work as for the connection. One goroutine reads it.
type sockReader struct {
	rc   syscall.RawConn
	fn   func(fd uintptr) bool // r.readFd, bound once: no closure per Read
	b    []byte                // the current Read's buffer
	n    int
	rerr error
}

// newSockReader reads c directly where it has a descriptor, else through
// c itself.
func newSockReader(c net.Conn) io.Reader {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	r := &sockReader{rc: rc}
	r.fn = r.readFd
	return r
}

func (r *sockReader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.b, r.n, r.rerr = b, 0, nil
	err := r.rc.Read(r.fn)
	n, rerr := r.n, r.rerr
	r.b, r.rerr = nil, nil
	if err != nil {
		return n, err
	}
	return n, rerr
}

// readFd is one read(2) into r.b: false (wait for the poller) when the
// socket is empty.
func (r *sockReader) readFd(fd uintptr) bool {
	for {
		m, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.b[0])), uintptr(len(r.b)))
		switch e {
		case 0:
			r.n = int(m)
			if r.n == 0 {
				r.rerr = io.EOF
			}
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			r.rerr = e
			return true
		}
	}
}
