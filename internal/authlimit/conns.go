package authlimit

import (
	"net"
	"net/netip"
	"sync"
)

// Conns counts the open connections of each client (Key), for a
// per-IP connection cap. The zero value is ready to use.
type Conns struct {
	mu sync.Mutex
	m  map[netip.Addr]int
}

// Add adds d to the count of a's client and returns the new count; an
// address without an IP is not counted (0).
func (c *Conns) Add(a net.Addr, d int) int {
	ip := AddrOf(a)
	if !ip.IsValid() {
		return 0
	}
	k := Key(ip)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[netip.Addr]int)
	}
	n := c.m[k] + d
	if n <= 0 {
		delete(c.m, k)
	} else {
		c.m[k] = n
	}
	return n
}

// AddrOf returns a's IP (IPv4-mapped addresses unmapped), or the zero
// Addr when a carries none.
func AddrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap()
}
