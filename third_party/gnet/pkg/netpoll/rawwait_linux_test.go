// Added by latchd to gnet v2.10.0 (not part of upstream gnet): see
// third_party/gnet/LATCHD.md.

//go:build linux && !poll_opt

package netpoll

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	errorx "github.com/panjf2000/gnet/v2/pkg/errors"
	"github.com/panjf2000/gnet/v2/pkg/queue"
)

func TestSetRawIdleWait(t *testing.T) {
	defer SetRawIdleWait(RawIdleWait())
	for _, on := range []bool{true, false, true} {
		SetRawIdleWait(on)
		if got := RawIdleWait(); got != on {
			t.Errorf("SetRawIdleWait(%v): RawIdleWait() = %v", on, got)
		}
	}
}

// polling runs p.Polling with a level-triggered pipe registered, and
// reports each byte read from it on got. stop ends Polling (through a
// task, as an engine's shutdown does) and returns its error.
func polling(t *testing.T) (p *Poller, wfd int, got <-chan byte, stop func() error) {
	t.Helper()
	p, err := OpenPoller()
	if err != nil {
		t.Fatal(err)
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	ch := make(chan byte, 16)
	if err := p.AddRead(&PollAttachment{FD: fds[0]}, false); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- p.Polling(func(fd int, _ IOEvent, _ IOFlags) error {
			var b [1]byte
			if n, _ := unix.Read(fd, b[:]); n == 1 {
				ch <- b[0]
			}
			return nil
		})
	}()
	stop = func() error {
		_ = p.Trigger(queue.HighPriority, func(any) error { return errorx.ErrEngineShutdown }, nil)
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Polling did not return")
		}
		_ = unix.Close(fds[0])
		_ = unix.Close(fds[1])
		_ = p.Close()
		return err
	}
	return p, fds[1], ch, stop
}

func recv(t *testing.T, got <-chan byte, want byte) {
	t.Helper()
	select {
	case b := <-got:
		if b != want {
			t.Fatalf("read %d, want %d", b, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("byte %d not seen in 5s", want)
	}
}

// TestRawIdleWaitServes: with the raw idle wait on, the poller sees I/O
// and runs tasks whether they come during a raw wait or after a signal
// ended it (idle for more than the runtime's 10 ms preemption) and the
// loop waits the ordinary way.
func TestRawIdleWaitServes(t *testing.T) {
	defer SetRawIdleWait(RawIdleWait())
	for _, on := range []bool{false, true} {
		SetRawIdleWait(on)
		p, wfd, got, stop := polling(t)
		for i, idle := range []time.Duration{0, 200 * time.Microsecond, 5 * time.Millisecond, 40 * time.Millisecond, 0} {
			time.Sleep(idle)
			if _, err := unix.Write(wfd, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			recv(t, got, byte(i))
			ran := make(chan struct{})
			time.Sleep(idle)
			if err := p.Trigger(queue.HighPriority, func(any) error { close(ran); return nil }, nil); err != nil {
				t.Fatalf("raw %v: Trigger: %v", on, err)
			}
			select {
			case <-ran:
			case <-time.After(5 * time.Second):
				t.Fatalf("raw %v: task not run after %v idle", on, idle)
			}
		}
		if err := stop(); !errors.Is(err, errorx.ErrEngineShutdown) {
			t.Fatalf("raw %v: Polling returned %v", on, err)
		}
	}
}

// TestRawIdleWaitYieldsToGC: a loop in a raw wait still stops for the
// garbage collector: the runtime's preemption signal interrupts the wait
// (EINTR) and the loop yields. A wait that did not yield would hang this
// test (a stopped world stops it too) until the test timeout.
func TestRawIdleWaitYieldsToGC(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two processors: the raw wait keeps one")
	}
	defer SetRawIdleWait(RawIdleWait())
	SetRawIdleWait(true)
	p, _, _, stop := polling(t)
	defer stop()
	for i := 0; i < 5; i++ {
		ran := make(chan struct{})
		_ = p.Trigger(queue.HighPriority, func(any) error { close(ran); return nil }, nil)
		<-ran // the loop goes back to a raw wait after the task
		runtime.GC()
	}
}

// TestRawIdleWaitGivesBack: once a signal has ended a raw wait, the loop
// waits in an ordinary system call (its goroutine shows as in a syscall)
// for the rest of the idle spell, so an idle server gives its processor
// back. Taking a stack dump stops the world, which is such a signal.
func TestRawIdleWaitGivesBack(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two processors: the raw wait keeps one")
	}
	defer SetRawIdleWait(RawIdleWait())
	for _, on := range []bool{false, true} {
		SetRawIdleWait(on)
		p, _, _, stop := polling(t)
		ran := make(chan struct{})
		_ = p.Trigger(queue.HighPriority, func(any) error { close(ran); return nil }, nil)
		<-ran
		buf := make([]byte, 1<<20)
		var state string
		deadline := time.Now().Add(5 * time.Second)
		for !strings.HasPrefix(state, "syscall") && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
			state = pollingState(buf[:runtime.Stack(buf, true)])
		}
		if !strings.HasPrefix(state, "syscall") {
			t.Errorf("raw %v: the idle loop's goroutine is %q, want in a syscall", on, state)
		}
		if err := stop(); !errors.Is(err, errorx.ErrEngineShutdown) {
			t.Fatalf("raw %v: Polling returned %v", on, err)
		}
	}
}

// pollingState is the state of the goroutine running Polling in a dump
// of all goroutines ("running", "syscall", ...).
func pollingState(dump []byte) string {
	for _, g := range strings.Split(string(dump), "\n\n") {
		if !strings.Contains(g, "netpoll.(*Poller).Polling") {
			continue
		}
		head, _, _ := strings.Cut(g, "\n")
		if _, st, ok := strings.Cut(head, "["); ok {
			st, _, _ = strings.Cut(st, "]")
			return st
		}
	}
	return ""
}
