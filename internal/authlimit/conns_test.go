package authlimit

import (
	"net"
	"net/netip"
	"testing"
)

// TestConns counts per client: an IPv6 /64 is one client, an IPv4-mapped
// address is its IPv4 one, and an address without an IP is not counted.
func TestConns(t *testing.T) {
	var c Conns
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	if n := c.Add(tcp("[2001:db8::1]:1"), 1); n != 1 {
		t.Fatalf("first connection: %d; want 1", n)
	}
	if n := c.Add(tcp("[2001:db8::2]:2"), 1); n != 2 {
		t.Fatalf("same /64: %d; want 2", n)
	}
	if n := c.Add(tcp("[::ffff:10.0.0.1]:3"), 1); n != 1 {
		t.Fatalf("another client: %d; want 1", n)
	}
	if n := c.Add(tcp("10.0.0.1:4"), 1); n != 2 {
		t.Fatalf("IPv4-mapped and IPv4: %d; want 2", n)
	}
	if n := c.Add(&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, 1); n != 0 {
		t.Fatalf("no IP: %d; want 0", n)
	}
	for _, a := range []string{"[2001:db8::1]:1", "[2001:db8::2]:2", "10.0.0.1:3", "10.0.0.1:4"} {
		c.Add(tcp(a), -1)
	}
	if len(c.m) != 0 {
		t.Fatalf("counts left after every close: %v", c.m)
	}
}
