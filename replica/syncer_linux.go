package replica

import (
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A leader's WAL syncs through the kernel's asynchronous I/O: an
// IOCB_CMD_FDSYNC request (Linux 4.18 and later) runs fdatasync on a
// kernel worker, and its completion is counted on an eventfd that the
// goroutine waits for in the runtime's poller. A plain fdatasync(2)
// keeps the goroutine's processor in a system call for the whole flush
// (hundreds of microseconds here); the runtime's monitor takes such a
// processor back whenever the other one is busy, and every such retake
// keeps the monitor polling every 20 µs instead of every 10 ms
// (docs/cluster.md, "The leader's two speeds at 100 workers"). Waiting
// in the poller leaves the processor idle, like a socket read.
//
// The durability is fdatasync's: the kernel runs vfs_fsync(file, 1) for
// the request, and its error (EIO, ENOSPC) is the request's result.
// Where the kernel or a sandbox refuses AIO (io_setup fails, or
// io_submit says there is no AIO fsync here), the syncer falls back to
// fdatasync(2) for good; a request io_submit does not take, or whose
// wait fails, is flushed with fdatasync(2) too.

// aioCB is the kernel's struct iocb (include/uapi/linux/aio_abi.h). Its
// key and rwFlags (PADDED(aio_key, aio_rw_flags), swapped on big-endian
// systems) stay zero, so their order does not matter.
type aioCB struct {
	data    uint64
	key     uint32
	rwFlags uint32
	opcode  uint16
	reqprio int16
	fildes  uint32
	buf     uint64
	nbytes  uint64
	offset  int64
	_       uint64
	flags   uint32
	resfd   uint32
}

// aioEvent is struct io_event.
type aioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

const (
	aioCmdFdsync  = 3 // IOCB_CMD_FDSYNC
	aioFlagResfd  = 1 // IOCB_FLAG_RESFD: count the completion on resfd
	aioCBSize     = 64
	aioEventSize  = 32
	aioContextCap = 1
)

// syncer flushes a file's data. One request is in flight at a time.
type syncer struct {
	mu   sync.Mutex
	ctx  uintptr  // aio_context_t; 0: fdatasync(2)
	seq  uint64   // the request's aio_data, checked on its completion
	ev   *os.File // the eventfd, non-blocking: its reads park in the poller
	cb   aioCB    // the kernel reads it during io_submit only
	cbp  [1]*aioCB
	evs  [1]aioEvent
	zero unix.Timespec // io_getevents' timeout: poll, never block
	cnt  [8]byte
}

// newSyncer sets up an AIO context and its eventfd. A failure leaves the
// syncer on fdatasync(2).
func newSyncer() *syncer {
	s := &syncer{}
	if !rawPwrite || unsafe.Sizeof(aioCB{}) != aioCBSize || unsafe.Sizeof(aioEvent{}) != aioEventSize {
		return s // 64-bit systems only, like the held write
	}
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, aioContextCap, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return s
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return s
	}
	ev := os.NewFile(uintptr(fd), "wal-sync-eventfd")
	if ev.SetReadDeadline(time.Time{}) != nil {
		// Not in the poller: its reads would spin on EAGAIN.
		_ = ev.Close()
		_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return s
	}
	s.ctx, s.ev = ctx, ev
	return s
}

// async reports whether syncs go through AIO.
func (s *syncer) async() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx != 0
}

// sync is fdatasync(f), waited for in the poller where AIO works.
func (s *syncer) sync(f *os.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == 0 {
		return fdatasync(f)
	}
	s.seq++
	s.cb = aioCB{data: s.seq, opcode: aioCmdFdsync, fildes: uint32(f.Fd()), flags: aioFlagResfd, resfd: uint32(s.ev.Fd())}
	s.cbp[0] = &s.cb
	var e unix.Errno
	for {
		if e = aioSubmit(s.ctx, &s.cbp); e != unix.EINTR {
			break
		}
	}
	if e != 0 {
		// Nothing was started: flush the plain way, which also gives a
		// closed file's error. These refusals mean no AIO fsync here
		// at all (before Linux 4.18, a file system without it, a
		// seccomp profile), so from now on too; EAGAIN or ENOMEM is
		// this request's bad luck only.
		switch e {
		case unix.EINVAL, unix.ENOSYS, unix.EOPNOTSUPP, unix.EPERM:
			s.closeLocked()
		}
		return fdatasync(f)
	}
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_IO_GETEVENTS, s.ctx, 1, 1,
			uintptr(unsafe.Pointer(&s.evs[0])), uintptr(unsafe.Pointer(&s.zero)), 0)
		if e == 0 && n == 1 {
			if s.evs[0].data == s.seq {
				break
			}
			continue // not this request's (cannot happen: a sync never leaves one behind)
		}
		if e != 0 && e != unix.EINTR {
			return s.abandon(f)
		}
		// Not done: wait for the eventfd's count in the poller. A count
		// left by an earlier request only costs a turn of this loop.
		if _, err := s.ev.Read(s.cnt[:]); err != nil {
			return s.abandon(f)
		}
	}
	runtime.KeepAlive(f) // its descriptor stays open until the flush ends
	if r := s.evs[0].res; r < 0 {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: unix.Errno(-r)}
	}
	return nil
}

// abandon gives up on AIO after the wait for a submitted request failed:
// closing the context waits for the request, and a plain fdatasync then
// says how the file stands. Under mu.
func (s *syncer) abandon(f *os.File) error {
	s.closeLocked()
	return fdatasync(f)
}

// aioSubmit is io_submit of one request (a variable for tests).
var aioSubmit = func(ctx uintptr, cbp *[1]*aioCB) unix.Errno {
	_, _, e := unix.RawSyscall(unix.SYS_IO_SUBMIT, ctx, 1, uintptr(unsafe.Pointer(&cbp[0])))
	return e
}

// close releases the context and the eventfd; later syncs use
// fdatasync(2).
func (s *syncer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
}

func (s *syncer) closeLocked() {
	if s.ctx == 0 {
		return
	}
	// io_destroy waits for a request still in flight (none: sync holds
	// mu until its completion is reaped).
	_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, s.ctx, 0, 0)
	_ = s.ev.Close()
	s.ctx, s.ev = 0, nil
}
