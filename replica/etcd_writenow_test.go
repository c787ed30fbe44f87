//go:build !hashicorpraft

package replica

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// TestWriteNowNeverWaits: writeNow to a socket whose peer does not read
// takes what fits, says how much, and returns at once without an error;
// what it took arrives.
func TestWriteNowNeverWaits(t *testing.T) {
	a, b := tcpPair(t)
	big := bytes.Repeat([]byte{'x'}, 32<<20) // more than a loopback socket holds
	// A write that waited would wait for ever: nobody reads b.
	var n int
	var err error
	wrote := make(chan struct{})
	go func() { defer close(wrote); n, err = writeNow(a, big) }()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("writeNow still waiting after 10 s on a socket nobody reads")
	}
	if err != nil || n <= 0 || n >= len(big) {
		t.Fatalf("writeNow of %d bytes to a socket nobody reads = %d, %v; want part of it, no error", len(big), n, err)
	}
	if m, err := writeNow(a, big[:1]); m != 0 || err != nil {
		t.Fatalf("writeNow to a full socket = %d, %v; want 0, nil", m, err)
	}
	_ = a.Close()
	got, err := io.ReadAll(b)
	if err != nil || len(got) != n || strings.Trim(string(got), "x") != "" {
		t.Fatalf("read %d bytes (%v), want %d x's", len(got), err, n)
	}
}
