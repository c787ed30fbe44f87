package testport

import (
	"net"
	"testing"
)

// TestFreeHandsOutDistinctBindablePorts: the addresses are loopback,
// below the ephemeral range, never handed out twice, and bindable.
func TestFreeHandsOutDistinctBindablePorts(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		addr := Free(t)
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" || port >= "32768" && len(port) == 5 {
			t.Fatalf("address %q: want 127.0.0.1 below 32768", addr)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("bind %s: %v", addr, err)
		}
		_ = ln.Close()
	}
}
