//go:build unix

package server

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
)

// closingConn is a gnet.Conn whose Write fails the way gnet's does on a
// reset socket: gnet closes the connection inside the Write (OnClose runs,
// then the descriptor is closed) and returns the error.
type closingConn struct {
	gnet.Conn
	s      *Server
	fd     int
	in     []byte
	ctx    any
	closed bool
}

func (c *closingConn) Context() any                  { return c.ctx }
func (c *closingConn) SetContext(v any)              { c.ctx = v }
func (c *closingConn) Fd() int                       { return c.fd }
func (c *closingConn) EventLoop() gnet.EventLoop     { return nil }
func (c *closingConn) RemoteAddr() net.Addr          { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *closingConn) Peek(int) ([]byte, error)      { return c.in, nil }
func (c *closingConn) Discard(n int) (int, error)    { c.in = c.in[n:]; return n, nil }
func (c *closingConn) OutboundBuffered() int         { return 0 }
func (c *closingConn) Wake(gnet.AsyncCallback) error { return nil }
func (c *closingConn) Close() error                  { return nil }
func (c *closingConn) Writev([][]byte) (int, error)  { return c.Write(nil) }
func (c *closingConn) Write(p []byte) (int, error) {
	if !c.closed {
		c.closed = true
		c.s.OnClose(c, syscall.EPIPE)
		_ = syscall.Close(c.fd)
	}
	return 0, syscall.EPIPE
}

// TestDirectAfterCloseInTurn: a turn whose write closes the connection
// (gnet closes on a write error, inside Write) and that left the session
// parked must not offer it to deliverers again: a grant collected under
// the shard lock before the disconnect and delivered after it would be
// written to the closed descriptor's number, which the kernel may have
// given to another client's socket.
func TestDirectAfterCloseInTurn(t *testing.T) {
	eng, err := engine.New(engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(DefaultConfig(), backend.NewLocal(eng), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	// Someone holds k, so the lock below parks.
	if _, err := eng.Acquire(now(), engine.AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1, TTL: 30e9}, nopSink{}); err != nil {
		t.Fatal(err)
	}
	pair := func() [2]int {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fds
	}
	a := pair()
	t.Cleanup(func() { _ = syscall.Close(a[1]) })
	// A release with a bad token (answered "error": the turn writes) and
	// a lock that parks.
	c := &closingConn{s: s, fd: a[0], in: []byte("r\nk\nbad\nl\nk\n30\n")}
	if _, act := s.OnOpen(c); act != gnet.None {
		t.Fatal("refused")
	}
	ss := c.ctx.(*session)
	if ss.fd != a[0] {
		t.Fatalf("fd %d, want %d", ss.fd, a[0])
	}
	s.OnTraffic(c)
	if !c.closed {
		t.Fatal("the turn did not write")
	}
	if st := ss.hand.Load(); st != handClosed {
		t.Errorf("hand = %d after the connection closed, want handClosed (%d)", st, handClosed)
	}
	// Another client's socket takes the descriptor's number.
	b := pair()
	t.Cleanup(func() { _ = syscall.Close(b[0]); _ = syscall.Close(b[1]) })
	ss.Deliver(engine.Outcome{Result: engine.Granted, TTL: 30e9})
	if err := syscall.SetNonblock(b[1], true); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := syscall.Read(b[1], buf)
	if n > 0 {
		t.Errorf("a closed session's grant was written to fd %d (reused by another socket): %q", b[0], buf[:n])
	} else if !errors.Is(err, syscall.EAGAIN) {
		t.Errorf("read: %v", err)
	}
}

type nopSink struct{}

func (nopSink) Deliver(engine.Outcome) {}

// wakeCounter is a gnet.Conn for a turn run by hand: its input is
// empty, Write records the answers, and Wake counts.
type wakeCounter struct {
	closingConn
	wakes int
	wrote []byte
}

func (c *wakeCounter) Wake(gnet.AsyncCallback) error { c.wakes++; return nil }
func (c *wakeCounter) Write(p []byte) (int, error) {
	c.wrote = append(c.wrote, p...)
	return len(p), nil
}

// TestDirectShortWrite: a direct hand-off to a socket with no room left
// writes nothing and hands the whole answer to the loop, which writes it
// at its next turn and unparks the session.
func TestDirectShortWrite(t *testing.T) {
	eng, err := engine.New(engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(DefaultConfig(), backend.NewLocal(eng), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fds[0]); _ = syscall.Close(fds[1]) })
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	fill := make([]byte, 4096)
	for {
		if _, err := syscall.Write(fds[0], fill); err != nil {
			if !errors.Is(err, syscall.EAGAIN) {
				t.Fatal(err)
			}
			break
		}
	}
	if _, err := eng.Acquire(now(), engine.AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1, TTL: 30e9}, nopSink{}); err != nil {
		t.Fatal(err)
	}
	c := &wakeCounter{closingConn: closingConn{s: s, fd: fds[0], in: []byte("l\nk\n30\n")}}
	if _, act := s.OnOpen(c); act != gnet.None {
		t.Fatal("refused")
	}
	ss := c.ctx.(*session)
	s.OnTraffic(c)
	if !ss.parked || ss.hand.Load() != handIdle {
		t.Fatalf("parked %v hand %d: want a parked idle session", ss.parked, ss.hand.Load())
	}
	ss.Deliver(engine.Outcome{Result: engine.TimedOut})
	if st := ss.hand.Load(); st != handLoop || c.wakes != 1 || !ss.woken.Load() {
		t.Fatalf("after a write that did not fit: hand %d, wakes %d, woken %v; want the loop woken to write it",
			st, c.wakes, ss.woken.Load())
	}
	s.OnTraffic(c) // the Wake's turn
	if string(c.wrote) != "timeout\n" || ss.parked {
		t.Fatalf("the loop wrote %q, parked %v; want the answer and the session unparked", c.wrote, ss.parked)
	}
}
