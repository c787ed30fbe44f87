package replica

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestWriteNowNeverWaits: a nowWriter's write to a socket whose peer does not read
// takes what fits, says how much, and returns at once without an error;
// what it took arrives.
func TestWriteNowNeverWaits(t *testing.T) {
	a, b := tcpPair(t)
	big := bytes.Repeat([]byte{'x'}, 32<<20) // more than a loopback socket holds
	// A write that waited would wait for ever: nobody reads b.
	var n int
	var err error
	wrote := make(chan struct{})
	w, err := newNowWriter(a)
	if err != nil {
		t.Fatal(err)
	}
	go func() { defer close(wrote); n, err = w.write(big) }()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("writeNow still waiting after 10 s on a socket nobody reads")
	}
	if err != nil || n <= 0 || n >= len(big) {
		t.Fatalf("writeNow of %d bytes to a socket nobody reads = %d, %v; want part of it, no error", len(big), n, err)
	}
	if m, err := w.write(big[:1]); m != 0 || err != nil {
		t.Fatalf("writeNow to a full socket = %d, %v; want 0, nil", m, err)
	}
	_ = a.Close()
	got, err := io.ReadAll(b)
	if err != nil || len(got) != n || strings.Trim(string(got), "x") != "" {
		t.Fatalf("read %d bytes (%v), want %d x's", len(got), err, n)
	}
}

// tcpPair is a connected loopback TCP pair.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}
