package client_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// fakeServer answers each three-line request with the next line of
// replies and records the requests it saw.
func fakeServer(t *testing.T, replies ...string) (addr string, got <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reqs := make(chan string, 16)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for _, r := range replies {
			var req strings.Builder
			for range 3 {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				req.WriteString(line)
			}
			reqs <- req.String()
			if _, err := io.WriteString(c, r); err != nil {
				return
			}
		}
		_, _ = io.Copy(io.Discard, br) // hold the connection until the client closes it
	}()
	return ln.Addr().String(), reqs
}

const tok1 = "00000000000000ff0123456789abcdef"

func TestConnAnswers(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		reply      string
		call       func(c *client.Conn) error
		wantReq    string
		wantErr    error
		wantLeader string
		wantClosed bool
	}{
		{name: "acquire ok", reply: "ok " + tok1 + " 30\n", wantReq: "l\nk\n10 30\n",
			call: func(c *client.Conn) error {
				g, err := c.Acquire(ctx, "k", 10*time.Second, 30*time.Second)
				if err == nil && (g.Token != tok1 || g.TTL != 30*time.Second || g.Fence() != 255) {
					t.Errorf("grant = %+v fence %d; want %s 30s fence 255", g, g.Fence(), tok1)
				}
				return err
			}},
		{name: "acquire rounds up, default ttl", reply: "timeout\n", wantReq: "l\nk\n2\n", wantErr: client.ErrTimeout,
			call: func(c *client.Conn) error {
				_, err := c.Acquire(ctx, "k", 1500*time.Millisecond, 0)
				return err
			}},
		{name: "sem acquire", reply: "error_limit_mismatch\n", wantReq: "sl\nk\n0 3 5\n", wantErr: client.ErrLimitMismatch,
			call: func(c *client.Conn) error {
				_, err := c.SemAcquire(ctx, "k", 3, 0, 5*time.Second)
				return err
			}},
		{name: "max locks", reply: "error_max_locks\n", wantReq: "l\nk\n0\n", wantErr: client.ErrMaxLocks,
			call: func(c *client.Conn) error { _, err := c.Acquire(ctx, "k", 0, 0); return err }},
		{name: "max waiters", reply: "error_max_waiters\n", wantReq: "e\nk\n\n", wantErr: client.ErrMaxWaiters,
			call: func(c *client.Conn) error { _, _, err := c.Enqueue(ctx, "k", 0); return err }},
		{name: "enqueue queued", reply: "queued\n", wantReq: "se\nk\n2 7\n",
			call: func(c *client.Conn) error {
				_, acquired, err := c.SemEnqueue(ctx, "k", 2, 7*time.Second)
				if acquired {
					t.Error("queued enqueue reported acquired")
				}
				return err
			}},
		{name: "enqueue twice", reply: "error\n", wantReq: "e\nk\n\n", wantErr: client.ErrAlreadyQueued,
			call: func(c *client.Conn) error { _, _, err := c.Enqueue(ctx, "k", 0); return err }},
		{name: "wait not queued", reply: "error\n", wantReq: "sw\nk\n3\n", wantErr: client.ErrNotQueued,
			call: func(c *client.Conn) error { _, err := c.SemWait(ctx, "k", 3*time.Second); return err }},
		{name: "enqueue already enqueued", reply: "error_already_enqueued\n", wantReq: "se\nk\n2\n", wantErr: client.ErrAlreadyQueued,
			call: func(c *client.Conn) error { _, _, err := c.SemEnqueue(ctx, "k", 2, 0); return err }},
		{name: "wait not enqueued", reply: "error_not_enqueued\n", wantReq: "w\nk\n1\n", wantErr: client.ErrNotQueued,
			call: func(c *client.Conn) error { _, err := c.Wait(ctx, "k", time.Second); return err }},
		{name: "wait lease expired", reply: "error_lease_expired\n", wantReq: "w\nk\n1\n", wantErr: client.ErrLeaseExpired,
			call: func(c *client.Conn) error { _, err := c.Wait(ctx, "k", time.Second); return err }},
		{name: "release not holder", reply: "error\n", wantReq: "r\nk\n" + tok1 + "\n", wantErr: client.ErrNotHolder,
			call: func(c *client.Conn) error { return c.Release(ctx, "k", tok1) }},
		{name: "renew", reply: "ok 9\n", wantReq: "sn\nk\n" + tok1 + " 9\n",
			call: func(c *client.Conn) error {
				rem, err := c.SemRenew(ctx, "k", tok1, 9*time.Second)
				if err == nil && rem != 9*time.Second {
					t.Errorf("remaining = %v, want 9s", rem)
				}
				return err
			}},
		{name: "not leader", reply: "error_not_leader 10.0.0.2:6388\n", wantReq: "l\nk\n0\n", wantLeader: "10.0.0.2:6388",
			call: func(c *client.Conn) error { _, err := c.Acquire(ctx, "k", 0, 0); return err }},
		{name: "auth rejected closes", reply: "error_auth\n", wantReq: "l\nk\n0\n", wantErr: client.ErrAuth, wantClosed: true,
			call: func(c *client.Conn) error { _, err := c.Acquire(ctx, "k", 0, 0); return err }},
		{name: "garbage closes", reply: "hello\n", wantReq: "r\nk\n" + tok1 + "\n", wantErr: client.ErrProtocol, wantClosed: true,
			call: func(c *client.Conn) error { return c.Release(ctx, "k", tok1) }},
		{name: "bad token in grant closes", reply: "ok XYZ 30\n", wantReq: "l\nk\n0\n", wantErr: client.ErrProtocol, wantClosed: true,
			call: func(c *client.Conn) error { _, err := c.Acquire(ctx, "k", 0, 0); return err }},
		{name: "stats", reply: `ok {"connections":3,"locks":[{"key":"a b","waiters":2}]}` + "\n", wantReq: "stats\n_\n_\n",
			call: func(c *client.Conn) error {
				st, err := c.Stats(ctx)
				if err == nil && (st.Connections != 3 || len(st.Locks) != 1 || st.Locks[0].Waiters != 2) {
					t.Errorf("stats = %+v", st)
				}
				return err
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, reqs := fakeServer(t, tt.reply)
			c, err := client.Dial(ctx, addr, client.WithIOTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = tt.call(c)
			if req := <-reqs; req != tt.wantReq {
				t.Errorf("request = %q, want %q", req, tt.wantReq)
			}
			var nl *client.NotLeaderError
			switch {
			case tt.wantLeader != "":
				if !errors.As(err, &nl) || nl.Leader != tt.wantLeader {
					t.Errorf("err = %v, want NotLeaderError{%s}", err, tt.wantLeader)
				}
			case !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil):
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if closed := c.Err() != nil; closed != tt.wantClosed {
				t.Errorf("closed = %v (%v), want %v", closed, c.Err(), tt.wantClosed)
			}
		})
	}
}

func TestConnRefusesBadRequests(t *testing.T) {
	addr, _ := fakeServer(t)
	c, err := client.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{name: "empty key", call: func() error { _, err := c.Acquire(ctx, "", 0, 0); return err }},
		{name: "key with space", call: func() error { _, err := c.Acquire(ctx, "a b", 0, 0); return err }},
		{name: "key too long", call: func() error { _, err := c.Acquire(ctx, strings.Repeat("k", 257), 0, 0); return err }},
		{name: "limit 0", call: func() error { _, err := c.SemAcquire(ctx, "k", 0, 0, 0); return err }},
		{name: "bad token", call: func() error { return c.Release(ctx, "k", "nope") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, client.ErrBadRequest) {
				t.Fatalf("err = %v, want ErrBadRequest", err)
			}
			if c.Err() != nil {
				t.Fatalf("a refused request closed the Conn: %v", c.Err())
			}
		})
	}
}

func dial(t *testing.T, addr string, opts ...client.Option) *client.Conn {
	t.Helper()
	c, err := client.Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatalf("Dial(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConnProtocol(t *testing.T) {
	srv := servertest.StartServer(t)
	ctx := context.Background()
	a, b := dial(t, srv.Addr), dial(t, srv.Addr)

	g, err := a.Acquire(ctx, "job", 0, 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if _, err := fence.ParseString(g.Token); err != nil || g.TTL != 10*time.Second {
		t.Fatalf("grant = %+v (%v), want a token and 10s", g, err)
	}
	if _, err := b.Acquire(ctx, "job", 0, 0); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("second Acquire = %v, want ErrTimeout", err)
	}
	if rem, err := a.Renew(ctx, "job", g.Token, 20*time.Second); err != nil || rem != 20*time.Second {
		t.Fatalf("Renew = %v, %v; want 20s", rem, err)
	}
	if _, acquired, err := b.Enqueue(ctx, "job", 0); err != nil || acquired {
		t.Fatalf("Enqueue = %v, %v; want queued", acquired, err)
	}
	if _, _, err := b.Enqueue(ctx, "job", 0); !errors.Is(err, client.ErrAlreadyQueued) {
		t.Fatalf("second Enqueue = %v, want ErrAlreadyQueued", err)
	}
	st, err := a.Stats(ctx)
	if err != nil || len(st.Locks) != 1 || st.Locks[0].Key != "job" || st.Locks[0].Waiters != 1 || st.Connections != 2 {
		t.Fatalf("Stats = %+v, %v; want job held with 1 waiter, 2 connections", st, err)
	}
	if err := a.Release(ctx, "job", g.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := a.Release(ctx, "job", g.Token); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("second Release = %v, want ErrNotHolder", err)
	}
	g2, err := b.Wait(ctx, "job", 5*time.Second)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if g2.Fence() <= g.Fence() {
		t.Fatalf("fence went from %d to %d; want it to grow", g.Fence(), g2.Fence())
	}
	if _, err := a.Wait(ctx, "job", 0); !errors.Is(err, client.ErrNotQueued) {
		t.Fatalf("Wait without Enqueue = %v, want ErrNotQueued", err)
	}
	if _, err := a.Renew(ctx, "job", g.Token, 0); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("Renew of a released lease = %v, want ErrNotHolder", err)
	}
	if a.Err() != nil || b.Err() != nil {
		t.Fatalf("connections closed: %v, %v", a.Err(), b.Err())
	}
}

func TestDialAuth(t *testing.T) {
	srv := servertest.StartServer(t, func(_ *engine.Config, s *server.Config) { s.AuthToken = "s3cret" })
	ctx := context.Background()

	c := dial(t, srv.Addr, client.WithAuthToken("s3cret"))
	if _, err := c.Acquire(ctx, "k", 0, 0); err != nil {
		t.Fatalf("Acquire after auth: %v", err)
	}
	if _, err := client.Dial(ctx, srv.Addr, client.WithAuthToken("wrong")); !errors.Is(err, client.ErrAuth) {
		t.Fatalf("Dial with a wrong token = %v, want ErrAuth", err)
	}
	anon := dial(t, srv.Addr)
	if _, err := anon.Acquire(ctx, "k2", 0, 0); !errors.Is(err, client.ErrAuth) || anon.Err() == nil {
		t.Fatalf("Acquire without auth = %v (closed: %v), want ErrAuth and a closed Conn", err, anon.Err())
	}

	open := servertest.StartServer(t)
	if _, err := client.Dial(ctx, open.Addr, client.WithAuthToken("s3cret")); !errors.Is(err, client.ErrAuth) {
		t.Fatalf("Dial with a token to a server without one = %v, want ErrAuth", err)
	}
}

func TestConnCancelWithdrawsWait(t *testing.T) {
	srv := servertest.StartServer(t)
	holder, waiter := dial(t, srv.Addr), dial(t, srv.Addr)
	if _, err := holder.Acquire(context.Background(), "busy", 0, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "busy", time.Minute, 0)
		errc <- err
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "busy") == 1 }, "waiter queued")
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled Acquire = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("canceled Acquire still blocked after 2s")
	}
	if !errors.Is(waiter.Err(), client.ErrClosed) {
		t.Fatalf("waiter Err = %v, want ErrClosed", waiter.Err())
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "busy") == 0 }, "wait withdrawn")
}

// waitersOn returns the number of waiters on a held lock, -1 if not held.
func waitersOn(srv *servertest.Server, key string) int {
	for _, l := range srv.Engine.Snapshot(time.Now().UnixNano()).Locks {
		if l.Key == key {
			return l.Waiters
		}
	}
	return -1
}

func TestLeaseExpiredIsNotQueued(t *testing.T) {
	if !errors.Is(client.ErrLeaseExpired, client.ErrNotQueued) {
		t.Error("ErrLeaseExpired does not match ErrNotQueued")
	}
	if errors.Is(client.ErrNotQueued, client.ErrLeaseExpired) {
		t.Error("ErrNotQueued matches ErrLeaseExpired")
	}
}
