package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// holdersOf returns the owners holding key on m's replica, in grant order.
func holdersOf(m *servertest.Member, key string) []uint64 {
	ki, ok := m.Node.FSM().Engine().InspectMax(time.Now().UnixNano(), key, -1)
	if !ok {
		return nil
	}
	var out []uint64
	for _, h := range ki.Holders {
		out = append(out, uint64(h.Owner))
	}
	return out
}

// sessionOwned reports whether owner is a session on m: what it holds
// belongs to the session, whatever connection renews it.
func sessionOwned(m *servertest.Member, owner uint64) bool {
	_, ok := m.Node.FSM().Engine().SessionTTL(engine.OwnerID(owner))
	return ok
}

// leaseExpiry returns the lease left on key's first holder on m, in
// seconds, or -1 when nobody holds it.
func leaseExpiry(m *servertest.Member, key string) float64 {
	ki, ok := m.Node.FSM().Engine().InspectMax(time.Now().UnixNano(), key, 1)
	if !ok || len(ki.Holders) == 0 {
		return -1
	}
	return ki.Holders[0].LeaseExpiresInS
}

// auditHolder is what the audit needs of a Lock, a Semaphore and an
// Election: how latchctl lock, sem and elect hold their grant.
type auditHolder struct {
	take    func(context.Context) error
	give    func(context.Context) error
	holding func() bool
}

// TestAudit_ClusterClientKeepsItsGrant: a grant held through the cluster
// client (Lock, Semaphore and Election, which latchctl lock, sem and elect
// run CMD under) stays on the one connection that took it: renewal after
// renewal, the leader sees the same owner hold it and the client keeps
// holding. A client that dialled a connection per call would have its own
// disconnect release the grant (or, renewing by token on a new
// connection, show a new owner).
func TestAudit_ClusterClientKeepsItsGrant(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	m := c.Members()[li]
	var seeds []string
	for i, mm := range c.Members() { // a follower first: the client follows the redirect
		if i != li {
			seeds = append(seeds, mm.Addr)
		}
	}
	seeds = append(seeds, m.Addr)
	opts := []client.Option{client.WithBackoff(10*time.Millisecond, 50*time.Millisecond)}
	kinds := map[string]func(key string) auditHolder{
		"lock": func(key string) auditHolder {
			l := &client.Lock{Key: key, LeaseTTL: 1, Cluster: seeds, Options: opts}
			return auditHolder{func(ctx context.Context) error { return okOrErr(l.Acquire(ctx)) }, l.Release, l.Held}
		},
		"semaphore": func(key string) auditHolder {
			s := &client.Semaphore{Key: key, Limit: 2, LeaseTTL: 1, Cluster: seeds, Options: opts}
			return auditHolder{func(ctx context.Context) error { return okOrErr(s.Acquire(ctx)) }, s.Release, s.Held}
		},
		"election": func(key string) auditHolder {
			e := &client.Election{Name: key, LeaseTTL: 1, Cluster: seeds, Options: opts}
			return auditHolder{e.Campaign, e.Resign, e.Leading}
		},
	}
	for name, mk := range kinds {
		t.Run(name, func(t *testing.T) {
			key := "audit-" + name
			h := mk(key)
			ctx := context.Background()
			if err := h.take(ctx); err != nil {
				t.Fatalf("take: %v", err)
			}
			first := holdersOf(m, key)
			if len(first) != 1 {
				t.Fatalf("holders of %s on the leader: %v; want one", key, first)
			}
			// A 1 s lease renews every half second: watch three renewals
			// land (the lease left jumps back up) with the owner unchanged.
			renewals, last := 0, leaseExpiry(m, key)
			testutil.Eventually(t, 20*time.Second, func() bool {
				got := holdersOf(m, key)
				if len(got) != 1 || got[0] != first[0] || !h.holding() {
					t.Fatalf("after %d renewals: holders %v, holding %v; want owner %d held throughout",
						renewals, got, h.holding(), first[0])
				}
				if left := leaseExpiry(m, key); left > last+0.2 {
					renewals++
					last = left
				} else {
					last = min(last, left)
				}
				return renewals >= 3
			}, "three renewals")
			if err := h.give(ctx); err != nil {
				t.Fatalf("give up: %v", err)
			}
			testutil.Eventually(t, 5*time.Second, func() bool { return len(holdersOf(m, key)) == 0 },
				"the grant released")
		})
	}
}

func okOrErr(ok bool, err error) error {
	if err == nil && !ok {
		return errors.New("not acquired")
	}
	return err
}

// notLeaderProxy forwards connections to target line by line; armed, it
// answers the next renew itself with error_not_leader naming itself (as a
// leader still taking over, or a node that just lost leadership and is
// about to regain it, answers) and tells answered. It closes the server's
// side of a connection only when the client closes its own.
type notLeaderProxy struct {
	Addr     string
	target   string
	mu       sync.Mutex
	armed    bool
	answered chan struct{}
}

func newNotLeaderProxy(t *testing.T, target string) *notLeaderProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &notLeaderProxy{Addr: ln.Addr().String(), target: target, answered: make(chan struct{}, 1)}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *notLeaderProxy) arm() {
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
}

func (p *notLeaderProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	var wmu sync.Mutex // the client's side: the server's answers and ours
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				wmu.Lock()
				_, _ = c.Write(buf[:n])
				wmu.Unlock()
			}
			if err != nil {
				_ = c.Close()
				return
			}
		}
	}()
	r := bufio.NewReader(c)
	for {
		var req [3]string
		for i := range req {
			line, err := r.ReadString('\n')
			if err != nil {
				return // the client closed: so does the server's side (defer)
			}
			req[i] = line
		}
		p.mu.Lock()
		intercept := p.armed && req[0] == "n\n"
		p.armed = p.armed && !intercept
		p.mu.Unlock()
		if intercept {
			wmu.Lock()
			_, _ = fmt.Fprintf(c, "error_not_leader %s\n", p.Addr)
			wmu.Unlock()
			p.answered <- struct{}{}
			continue
		}
		if _, err := io.WriteString(s, req[0]+req[1]+req[2]); err != nil {
			return
		}
	}
}

// TestAudit_ClusterClientRedirectKeepsGrant: the leader that granted a
// lock answers the holder's renewal with error_not_leader naming itself (a
// node that lost leadership and is regaining it answers so while it takes
// over) and then serves as leader again. The client must renew elsewhere
// by token without closing the connection that holds the grant: that
// close would reach a leader, whose disconnect would release the lock
// while the client still believes it holds it, and a second client could
// take it.
func TestAudit_ClusterClientRedirectKeepsGrant(t *testing.T) {
	c := servertest.StartCluster(t, 3, nil)
	li := c.Leader(servertest.LeaderTimeout)
	m := c.Members()[li]
	p := newNotLeaderProxy(t, m.Addr)
	ctx := context.Background()
	l := &client.Lock{Key: "k", LeaseTTL: 2, Cluster: []string{p.Addr, m.Addr},
		Options: []client.Option{client.WithBackoff(10*time.Millisecond, 50*time.Millisecond)}}
	if got, err := l.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	first := holdersOf(m, "k")
	p.arm()
	select {
	case <-p.answered:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal reached the proxy")
	}
	// The renewal goes on on the leader's own address, by token: the
	// lease moves to that connection, or stays with the client's session
	// where the cluster offers sessions (its owner is the session, not a
	// connection). Either way the second client below must not get the
	// key over more than a lease's time: the renewals go on.
	testutil.Eventually(t, 10*time.Second, func() bool {
		h := holdersOf(m, "k")
		return !l.Held() || (len(h) == 1 && (h[0] != first[0] || sessionOwned(m, h[0])))
	}, "the lease never moved to the new connection")
	if !l.Held() {
		t.Fatalf("the client lost its lock after a not-leader answer: %v", l.Err())
	}
	other, err := client.Dial(ctx, m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if g, err := other.Acquire(ctx, "k", 2*time.Second, 30*time.Second); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("a second client's acquire = %+v, %v while the Lock holds (Held=%v); want ErrTimeout", g, err, l.Held())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
