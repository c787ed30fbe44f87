// Added by latchd to gnet v2.10.0 (not part of upstream gnet): see
// third_party/gnet/LATCHD.md.

//go:build linux && !poll_opt

package netpoll

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	errorx "github.com/panjf2000/gnet/v2/pkg/errors"
	"github.com/panjf2000/gnet/v2/pkg/queue"
)

func TestSetRawIdleWait(t *testing.T) {
	defer SetRawIdleWait(RawIdleWait())
	for _, c := range []struct{ in, want time.Duration }{
		{0, 0},
		{-time.Millisecond, 0},
		{time.Nanosecond, time.Millisecond},
		{time.Millisecond, time.Millisecond},
		{1500 * time.Microsecond, 2 * time.Millisecond},
		{time.Second, time.Second},
		{time.Hour, time.Second},
	} {
		SetRawIdleWait(c.in)
		if got := RawIdleWait(); got != c.want {
			t.Errorf("SetRawIdleWait(%v): RawIdleWait() = %v, want %v", c.in, got, c.want)
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

// TestRawIdleWaitServes: with the hold on, the poller sees I/O and runs
// tasks whether they come during a hold or after it ran out and the loop
// blocked the ordinary way.
func TestRawIdleWaitServes(t *testing.T) {
	defer SetRawIdleWait(RawIdleWait())
	for _, hold := range []time.Duration{0, time.Millisecond, 50 * time.Millisecond} {
		SetRawIdleWait(hold)
		p, wfd, got, stop := polling(t)
		// Idle times shorter and longer than the hold: the loop is in the
		// raw wait, or past it in epoll_wait.
		for i, idle := range []time.Duration{0, 200 * time.Microsecond, 5 * time.Millisecond, 80 * time.Millisecond} {
			time.Sleep(idle)
			if _, err := unix.Write(wfd, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			recv(t, got, byte(i))
			ran := make(chan struct{})
			time.Sleep(idle)
			if err := p.Trigger(queue.HighPriority, func(any) error { close(ran); return nil }, nil); err != nil {
				t.Fatalf("hold %v: Trigger: %v", hold, err)
			}
			select {
			case <-ran:
			case <-time.After(5 * time.Second):
				t.Fatalf("hold %v: task not run after %v idle", hold, idle)
			}
		}
		if err := stop(); !errors.Is(err, errorx.ErrEngineShutdown) {
			t.Fatalf("hold %v: Polling returned %v", hold, err)
		}
	}
}

// TestRawIdleWaitYieldsToGC: a loop in a raw wait still stops for the
// garbage collector: the runtime's preemption signal interrupts the wait
// (EINTR) and the loop yields. A wait that did not yield would hang this
// test (a stopped world stops it too) until the test timeout.
func TestRawIdleWaitYieldsToGC(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two processors: the hold keeps one")
	}
	defer SetRawIdleWait(RawIdleWait())
	const hold = time.Second
	SetRawIdleWait(hold)
	p, _, _, stop := polling(t)
	defer stop()
	for i := 0; i < 5; i++ {
		ran := make(chan struct{})
		_ = p.Trigger(queue.HighPriority, func(any) error { close(ran); return nil }, nil)
		<-ran // the loop goes back to its raw wait after the task
		start := time.Now()
		runtime.GC()
		if d := time.Since(start); d > hold/2 {
			t.Fatalf("runtime.GC took %v with the loop in a %v raw wait", d, hold)
		}
	}
}
