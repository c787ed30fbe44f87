package listen

import (
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// script is a listener whose Accept returns the errors it is given, then
// real connections from the wrapped listener.
type script struct {
	net.Listener
	mu   sync.Mutex
	errs []error
}

func (s *script) Accept() (net.Conn, error) {
	s.mu.Lock()
	if len(s.errs) > 0 {
		err := s.errs[0]
		s.errs = s.errs[1:]
		s.mu.Unlock()
		return nil, err
	}
	s.mu.Unlock()
	return s.Listener.Accept()
}

func TestGuardBacksOffAndRecovers(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	emfile := &net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	aborted := &net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ECONNABORTED)}
	sc := &script{Listener: inner, errs: []error{aborted, emfile, emfile, emfile}}
	var mu sync.Mutex
	counts := map[string]int{}
	set := NewSet(nil, func(l, r string) {
		mu.Lock()
		counts[l+"/"+r]++
		mu.Unlock()
	})
	ln := set.Wrap("tcp", sc)
	defer ln.Close()

	type result struct {
		c   net.Conn
		err error
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		c, err := ln.Accept()
		got <- result{c, err}
	}()
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := <-got
	if r.err != nil {
		t.Fatalf("Accept returned %v; want the connection after the errors", r.err)
	}
	r.c.Close()
	// Three EMFILEs: 5 + 10 + 20 ms of backoff at least.
	if d := time.Since(start); d < 35*time.Millisecond {
		t.Errorf("accepted after %v; want the backoff (>= 35ms)", d)
	}
	mu.Lock()
	if counts["tcp/emfile"] != 3 || counts["tcp/econnaborted"] != 1 {
		t.Errorf("counts %v; want 3 emfile and 1 econnaborted", counts)
	}
	mu.Unlock()
	if down := set.Down(); len(down) != 0 {
		t.Errorf("down %v after a successful accept", down)
	}

	// Closed: Accept returns net.ErrClosed and the listener is not down.
	_ = ln.Close()
	_ = ln.Close() // twice is fine
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

func TestGuardDownWhileBackingOff(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	emfile := os.NewSyscallError("accept4", syscall.EMFILE)
	var errs []error
	for range 7 { // 5+10+20+40+80+160+320 ms
		errs = append(errs, emfile)
	}
	set := NewSet(nil, nil)
	ln := set.Wrap("http", &script{Listener: inner, errs: errs})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	if down := waitDown(set, []string{"http"}, 2*time.Second); len(down) != 1 || down[0] != "http" {
		t.Fatalf("Down() = %v while backing off; want [http]", down)
	}
	_ = ln.Close()
	<-done
	if down := set.Down(); len(down) != 0 {
		t.Fatalf("Down() = %v after Close", down)
	}
}

func TestDefaultCaps(t *testing.T) {
	for _, tt := range []struct {
		n         uint64
		rest      bool
		tcp, http int
	}{
		{n: 128, rest: true, tcp: 66, http: 22},
		{n: 128, rest: false, tcp: 88},
		{n: 1024, rest: true, tcp: 696, http: 232},
		{n: 20000, rest: false, tcp: 18718},
		{n: 10, rest: true, tcp: 1, http: 1},
	} {
		tcp, http := DefaultCaps(tt.n, tt.rest)
		if tcp != tt.tcp || http != tt.http {
			t.Errorf("DefaultCaps(%d, %v) = %d, %d; want %d, %d", tt.n, tt.rest, tcp, http, tt.tcp, tt.http)
		}
	}
}

// TestFreedCutsBackoff: a closed connection (Freed) ends a backoff step
// early, so a listener that ran out of descriptors accepts as soon as one
// is free rather than at the end of a step of up to a second. Without
// Freed, the steps of 40 failures take over 30 s; with it, the accept
// comes well within the test's 10 s deadline.
func TestFreedCutsBackoff(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	emfile := os.NewSyscallError("accept4", syscall.EMFILE)
	var errs []error
	for range 40 { // without Freed: 5+10+...+640 ms, then 32 steps of 1 s
		errs = append(errs, emfile)
	}
	g := NewSet(nil, nil).Wrap("tcp", &script{Listener: inner, errs: errs}).(*Guard)
	defer g.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				g.Freed()
			}
		}
	}()
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	accepted := make(chan error, 1)
	go func() {
		ac, err := g.Accept()
		if err == nil {
			ac.Close()
		}
		accepted <- err
	}()
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no accept within 10 s; Freed should cut the 33 s of backoff short")
	}
}

// acceptInBackground runs Accept on ln until it is closed, closing what it
// accepts, and returns a channel closed when it ends.
func acceptInBackground(ln net.Listener) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return done
}

// waitDown polls set.Down until it returns want (nil: none) or the deadline
// passes, and returns the last answer.
func waitDown(set *Set, want []string, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		got := set.Down()
		if strings.Join(got, ",") == strings.Join(want, ",") || !time.Now().Before(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGuardReportWhileWaitingIsNotDownForEver: a connection that could not be
// taken over for want of a descriptor is reported after Accept returned
// it, by which time Accept may be waiting in the kernel for the next
// client. Once descriptors are free the listener must not be down, though
// no client connects to prove it: /healthz would answer 503 for as long as
// nobody does.
func TestGuardReportWhileWaitingIsNotDownForEver(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	set := NewSet(nil, nil)
	g := set.Wrap("tcp", inner).(*Guard)
	done := acceptInBackground(g)
	defer func() { _ = g.Close(); <-done }()
	// One client through, so the accept loop runs and waits for the next.
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a connection the accept loop closed: want EOF")
	}
	c.Close()
	g.Report(os.NewSyscallError("dup", syscall.EMFILE))
	if down := waitDown(set, nil, 10*time.Second); len(down) != 0 {
		t.Fatalf("Down() = %v with descriptors free and nobody connecting; want none", down)
	}
	if g.down() {
		t.Fatal("down() = true with descriptors free")
	}
}

// TestGuardDownUntilDescriptorsFree: a listener whose backoff step ends while
// the process still has no descriptor free goes back to its accept, which
// may then wait for a client. It is down while no descriptor is free and
// up once one is, with no client connecting in between.
func TestGuardDownUntilDescriptorsFree(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var free atomic.Bool
	counted := make(chan struct{}, 1)
	set := NewSet(nil, func(string, string) {
		select {
		case counted <- struct{}{}:
		default:
		}
	})
	set.free = free.Load
	emfile := os.NewSyscallError("accept4", syscall.EMFILE)
	ln := set.Wrap("tcp", &script{Listener: inner, errs: []error{emfile}})
	done := acceptInBackground(ln)
	defer func() { _ = ln.Close(); <-done }()
	<-counted
	// Whether sleeping its backoff step or waiting in accept after it, the
	// listener has no descriptor for a client.
	for range 20 {
		if down := set.Down(); len(down) != 1 || down[0] != "tcp" {
			t.Fatalf("Down() = %v with no descriptor free; want [tcp]", down)
		}
		time.Sleep(time.Millisecond)
	}
	free.Store(true)
	if down := waitDown(set, nil, 10*time.Second); len(down) != 0 {
		t.Fatalf("Down() = %v with descriptors free and nobody connecting; want none", down)
	}
}
