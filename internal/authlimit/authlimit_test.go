package authlimit

import (
	"net/netip"
	"testing"
	"time"
)

func TestBlockedAfterBurstThenRefills(t *testing.T) {
	l := New(3, 0)
	ip := netip.MustParseAddr("10.0.0.1")
	other := netip.MustParseAddr("10.0.0.2")
	now := time.Unix(1000, 0)
	for i := range 3 {
		if b, _ := l.Blocked(ip, now); b {
			t.Fatalf("blocked after %d failures; want 3 allowed", i)
		}
		l.Failed(ip, now)
	}
	b, wait := l.Blocked(ip, now)
	if !b || wait <= 0 || wait > 20*time.Second {
		t.Fatalf("after 3 failures: blocked %v, retry in %v; want blocked, retry within 20s", b, wait)
	}
	if b, _ := l.Blocked(other, now); b {
		t.Fatal("another IP is blocked")
	}
	if b, _ := l.Blocked(netip.MustParseAddr("::ffff:10.0.0.1"), now); !b {
		t.Fatal("the IPv4-mapped form of a blocked IP is not blocked")
	}
	if b, _ := l.Blocked(ip, now.Add(21*time.Second)); b {
		t.Fatal("still blocked after a refill interval")
	}
}

func TestBoundedMemory(t *testing.T) {
	l := New(1, 100)
	now := time.Unix(1000, 0)
	for i := range 10000 {
		l.Failed(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), now)
		if n := l.Tracked(); n > 100 {
			t.Fatalf("tracking %d IPs after %d; want at most 100", n, i+1)
		}
	}
	// The most recent failing IP is still remembered.
	if b, _ := l.Blocked(netip.AddrFrom4([4]byte{10, 0, 39, 15}), now); !b {
		t.Fatal("the last failing IP was forgotten")
	}
}

// TestIPv6CountsPerPrefix: the addresses of one IPv6 /64 share a bucket.
// A host usually holds a whole /64, so counting single addresses would
// give it 2^64 fresh buckets: unlimited guesses, and a flood of them
// evicts every bucket it wants forgotten.
func TestIPv6CountsPerPrefix(t *testing.T) {
	l := New(3, 0)
	now := time.Unix(1000, 0)
	for i := range 3 {
		l.Failed(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 1)}), now)
	}
	if b, _ := l.Blocked(netip.MustParseAddr("2001:db8::ffff:1234"), now); !b {
		t.Fatal("a fresh address of a /64 that failed 3 times is not blocked")
	}
	if b, _ := l.Blocked(netip.MustParseAddr("2001:db8:0:1::1"), now); b {
		t.Fatal("the next /64 is blocked")
	}
	if l.Tracked() != 1 {
		t.Fatalf("tracked %d keys; want 1 (one /64)", l.Tracked())
	}
	for _, c := range []struct{ in, want string }{
		{"10.1.2.3", "10.1.2.3"},
		{"::ffff:10.1.2.3", "10.1.2.3"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"},
		{"fe80::1%eth0", "fe80::"},
	} {
		if got := Key(netip.MustParseAddr(c.in)); got != netip.MustParseAddr(c.want) {
			t.Errorf("Key(%s) = %s; want %s", c.in, got, c.want)
		}
	}
}

// Tracked returns how many IPs the Limiter remembers.
func (l *Limiter) Tracked() int { return l.b.Tracked() }

// Tracked returns how many IPs the buckets remember.
func (b *Buckets) Tracked() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.cur) + len(b.old)
}

// TestBucketsAllowBounded: a bucket refuses past its burst with the wait
// until its next token, and the buckets never track more than maxIPs IPs.
func TestBucketsAllowBounded(t *testing.T) {
	l := NewBuckets(1, 1, 100)
	now := time.Now()
	first := netip.MustParseAddr("10.0.0.1")
	if ok, _ := l.Allow(first, now); !ok {
		t.Fatalf("first request refused")
	}
	if ok, wait := l.Allow(first, now); ok || wait <= 0 || wait > time.Second {
		t.Fatalf("second request at once: ok %v, wait %v; want refused with wait in (0, 1s]", ok, wait)
	}
	for i := range 1000 {
		ip := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		l.Allow(ip, now)
		if n := l.Tracked(); n > 100 {
			t.Fatalf("tracking %d IPs; bound is 100", n)
		}
	}
}
