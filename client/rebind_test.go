package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// splitProxy forwards one connection to target; breakClient resets the
// client's side only, closeServer later closes the side the server sees.
type splitProxy struct {
	Addr     string
	mu       sync.Mutex
	cli, srv net.Conn
}

func newSplitProxy(t *testing.T, target string) *splitProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &splitProxy{Addr: ln.Addr().String()}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.cli, p.srv = c, s
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c) }()
			go func() { _, _ = io.Copy(c, s) }()
		}
	}()
	return p
}

func (p *splitProxy) breakClient() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cli.(*net.TCPConn).SetLinger(0)
	_ = p.cli.Close() // RST to the client; the server's side stays open
}

func (p *splitProxy) closeServer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.srv.Close()
}

// holderOf returns the connection id holding key on m, 0 if none.
func holderOf(m *servertest.Member, key string) uint64 {
	for _, l := range m.Node.FSM().Engine().Snapshot(time.Now().UnixNano()).Locks {
		if l.Key == key {
			return l.OwnerConnID
		}
	}
	return 0
}

// leaseEnd returns when key's lease ends on m, the zero time if none.
func leaseEnd(m *servertest.Member, key string) time.Time {
	now := time.Now()
	for _, l := range m.Node.FSM().Engine().Snapshot(now.UnixNano()).Locks {
		if l.Key == key {
			return now.Add(time.Duration(l.LeaseExpiresInS * float64(time.Second)))
		}
	}
	return time.Time{}
}

// TestRenewOnNewConnKeepsLease: a Cluster-backed Lock survives a broken
// connection by renewing on a new one (which acts for the same session, or
// without sessions takes the lease over); when the leader later sees the
// old connection close, it releases nothing, and a second client cannot
// take the lock.
// (A review found the first version released it while the Lock still
// reported Held.)
func TestRenewOnNewConnKeepsLease(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	m := c.Members()[li]
	leader := m.Addr
	p := newSplitProxy(t, leader)
	ctx := context.Background()
	l := &client.Lock{Key: "k", LeaseTTL: 4, Cluster: []string{p.Addr, leader},
		Options: []client.Option{client.WithBackoff(10*time.Millisecond, 50*time.Millisecond)}}
	if got, err := l.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	end := leaseEnd(m, "k")
	p.breakClient()
	// The renewal at TTL/2 breaks on the old connection and retries on
	// the leader's own address.
	testutil.Eventually(t, 30*time.Second, func() bool {
		return holderOf(m, "k") != 0 && leaseEnd(m, "k").After(end.Add(time.Second))
	}, "the lease was never renewed on the new connection")
	if !l.Held() {
		t.Fatalf("lease not held after the reconnect: %v", l.Err())
	}
	p.closeServer() // the leader sees the old connection close only now
	other, err := client.Dial(ctx, leader)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// Waits 2 s for the lock: the old connection's Disconnect lands in
	// that time, and must not free it.
	if g, err := other.Acquire(ctx, "k", 2*time.Second, 30*time.Second); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("a second client's acquire = %+v, %v while the Lock holds (Held=%v); want ErrTimeout", g, err, l.Held())
	}
	if !l.Held() {
		t.Fatalf("lease lost: %v", l.Err())
	}
	_ = l.Release(ctx)
}
