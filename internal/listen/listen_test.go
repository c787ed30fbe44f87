package listen

import (
	"errors"
	"net"
	"os"
	"sync"
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
	deadline := time.Now().Add(2 * time.Second)
	for len(set.Down()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if down := set.Down(); len(down) != 1 || down[0] != "http" {
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
