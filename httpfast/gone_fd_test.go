//go:build linux

package httpfast

import (
	"net"
	"testing"
	"time"
)

// TestPeerGoneAfterCloseDoesNotPollReusedFd: the watcher keeps a
// connection's RawConn, not its descriptor number. Once fasthttp closes
// the connection, a look reports the client gone, and never polls the
// socket that took the number since (a healthy one, which would read as
// not gone).
func TestPeerGoneAfterCloseDoesNotPollReusedFd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() (client, server net.Conn) {
		t.Helper()
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		select {
		case s := <-accepted:
			t.Cleanup(func() { _ = s.Close() })
			return c, s
		case <-time.After(5 * time.Second):
			t.Fatal("no accept")
		}
		return nil, nil
	}
	fdOf := func(c net.Conn) int {
		var fd int
		if err := rawConn(c).Control(func(u uintptr) { fd = int(u) }); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	_, srv := dial()
	rc := rawConn(srv)
	if rc == nil {
		t.Fatal("no raw conn")
	}
	if peerGone(rc) {
		t.Fatal("a live client reads as gone")
	}
	old := fdOf(srv)
	_ = srv.Close() // fasthttp is done with the connection
	// A healthy socket takes the lowest free number: the one just freed.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Close() }()
	if fd := fdOf(pc.(*net.UDPConn)); fd != old {
		t.Skipf("the descriptor number %d was not reused (got %d)", old, fd)
	}
	if !peerGone(rc) {
		t.Fatal("a closed connection reads as not gone: the watcher polled the reused descriptor")
	}
}
