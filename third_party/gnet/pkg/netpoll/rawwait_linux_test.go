// Added by latchd to gnet v2.10.0 (not part of upstream gnet): see
// third_party/gnet/LATCHD.md.

//go:build linux && !poll_opt

package netpoll

import (
	"errors"
	"os"
	"runtime"
	"runtime/metrics"
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
			var b [8]byte // 8: a timerfd's count (TestRawIdleWaitYieldsToGC)
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
	preemptible(t)
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

// preemptible skips a test that needs the runtime's preemption signal
// (see SetRawIdleWait): without it the raw wait would hang the test.
func preemptible(t *testing.T) {
	t.Helper()
	if strings.Contains(os.Getenv("GODEBUG"), "asyncpreemptoff=") {
		t.Skip("GODEBUG sets asyncpreemptoff: the raw wait depends on preemption")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two processors: the raw wait keeps one")
	}
}

// TestRawIdleWaitYieldsToGC: a loop in a raw wait still stops for the
// garbage collector: the runtime's preemption signal interrupts the wait
// (EINTR) and the loop yields. A timerfd in the poller, due every 2 s, is
// the backstop: a wait that did not yield would end there (a collection
// stops the world more than once), and the collection take that long.
func TestRawIdleWaitYieldsToGC(t *testing.T) {
	preemptible(t)
	defer SetRawIdleWait(RawIdleWait())
	SetRawIdleWait(true)
	p, _, _, stop := polling(t)
	defer stop()
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tfd)
	if err := p.AddRead(&PollAttachment{FD: tfd}, false); err != nil {
		t.Fatal(err)
	}
	const backstop = 2 * time.Second
	for i := 0; i < 5; i++ {
		due := unix.NsecToTimespec(int64(backstop))
		if err := unix.TimerfdSettime(tfd, 0, &unix.ItimerSpec{Value: due, Interval: due}, nil); err != nil {
			t.Fatal(err)
		}
		ran := make(chan struct{})
		_ = p.Trigger(queue.HighPriority, func(any) error { close(ran); return nil }, nil)
		<-ran
		time.Sleep(time.Millisecond) // the loop is back in a raw wait
		start := time.Now()
		runtime.GC()
		if d := time.Since(start); d > backstop/2 {
			t.Fatalf("runtime.GC took %v with the loop in a raw wait", d)
		}
	}
}

// TestRawIdleWaitGivesBack: the loop's goroutine stays out of system calls
// (as far as the scheduler sees) while in a raw wait, and once the
// runtime's preemption has ended the raw wait (10-20 ms into an idle
// spell) it waits in an ordinary system call for the rest of the spell,
// so an idle server gives its processor back. Off, it is in the ordinary
// call at once. Read from runtime/metrics, which stops nothing.
func TestRawIdleWaitGivesBack(t *testing.T) {
	preemptible(t)
	defer SetRawIdleWait(RawIdleWait())
	sample := []metrics.Sample{{Name: "/sched/goroutines/not-in-go:goroutines"}}
	inSyscalls := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	for _, on := range []bool{false, true} {
		SetRawIdleWait(on)
		base := inSyscalls() // before the poller's goroutine exists
		p, _, _, stop := polling(t)
		ran := make(chan struct{})
		_ = p.Trigger(queue.HighPriority, func(any) error { close(ran); return nil }, nil)
		<-ran
		if on {
			// The preemption comes 10 ms at the earliest.
			for end := time.Now().Add(3 * time.Millisecond); time.Now().Before(end); {
				if n := inSyscalls(); n > base {
					t.Fatalf("raw wait: %d goroutines in system calls (%d before the poller) right after a task", n, base)
				}
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for inSyscalls() <= base && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if n := inSyscalls(); n <= base {
			t.Errorf("raw %v: the idle loop is not in a system call after 5 s (%d, %d before)", on, n, base)
		}
		if err := stop(); !errors.Is(err, errorx.ErrEngineShutdown) {
			t.Fatalf("raw %v: Polling returned %v", on, err)
		}
	}
}
