package client_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// TestMuxCanceledAcquireLeavesQueue: an acquire over a Mux whose context
// ends while it waits leaves the key's queue at once (the Mux withdraws
// it), so the holder's release grants the next waiter directly: no grant
// to the Mux and release by it between them, no fence spent. The Mux
// works on.
func TestMuxCanceledAcquireLeavesQueue(t *testing.T) {
	srv := servertest.StartServer(t, orphanTTL(5*time.Second))
	canceledLeavesQueue(t, srv, "k", nil, func(ctx context.Context, m *client.Mux) error {
		_, err := m.Acquire(ctx, "k", time.Minute, 0)
		return err
	})
}

// TestMuxCanceledSetLeavesQueue: the same for a set, withdrawn from every
// key's queue.
func TestMuxCanceledSetLeavesQueue(t *testing.T) {
	srv := servertest.StartServer(t)
	canceledLeavesQueue(t, srv, "y", []string{"x"}, func(ctx context.Context, m *client.Mux) error {
		_, err := m.AcquireMany(ctx, []string{"x", "y"}, time.Minute, 0)
		return err
	})
}

// canceledLeavesQueue runs wait, a request of a Mux that waits on key
// (and takes others, free, with it), cancels its context while a plain
// connection waits behind it, and checks the Mux's request left every
// queue at once and the one behind it is granted next.
func canceledLeavesQueue(t *testing.T, srv *servertest.Server, key string, others []string,
	wait func(context.Context, *client.Mux) error) {
	t.Helper()
	ctx := context.Background()
	m, err := client.DialMux(ctx, []string{srv.Addr}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h, q := plainConn(t, srv), plainConn(t, srv)
	g, err := h.Acquire(ctx, key, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wait(cctx, m) }()
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, key) == 1 }, "the Mux's request queued")
	next := make(chan manyResult, 1)
	go func() {
		g, err := q.Acquire(ctx, key, time.Minute, 0)
		next <- manyResult{gs: []client.Grant{g}, err: err}
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, key) == 2 }, "the plain waiter queued")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled request = %v", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, key) == 1 }, "the canceled request left the queue")
	for _, k := range others {
		if n := waitersOn(srv, k); n > 0 {
			t.Fatalf("%d waiters left on %s", n, k)
		}
	}
	if err := h.Release(ctx, key, g.Token); err != nil {
		t.Fatal(err)
	}
	r := <-next
	if r.err != nil {
		t.Fatalf("the next waiter: %v", r.err)
	}
	gq := r.gs[0]
	if got, want := fenceOf(t, gq.Token), fenceOf(t, g.Token)+1; got != want {
		t.Fatalf("the next waiter's fence = %d; want %d (a grant came between)", got, want)
	}
	if err := q.Release(ctx, key, gq.Token); err != nil {
		t.Fatal(err)
	}
	mg, err := m.Acquire(ctx, key, 5*time.Second, 0)
	if err != nil {
		t.Fatalf("the Mux after the cancel: %v", err)
	}
	if err := m.Release(ctx, key, mg.Token); err != nil {
		t.Fatal(err)
	}
}

// plainConn dials a plain connection to srv, closed when the test ends.
func plainConn(t *testing.T, srv *servertest.Server) *client.Conn {
	t.Helper()
	c, err := client.Dial(context.Background(), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestMuxCancelRefused: against a server that does not know cancel (it
// answers error) the Mux keeps its abandoned acquire, and releases the
// grant that comes to it later.
func TestMuxCancelRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	parked, released := make(chan struct{}, 1), make(chan string, 1)
	go oldServer(ln, parked, released)
	ctx := context.Background()
	m, err := client.DialMux(ctx, []string{ln.Addr().String()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := m.Acquire(cctx, "k", time.Minute, 0); done <- err }()
	<-parked
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled acquire = %v", err)
	}
	select {
	case got := <-released:
		if got != "k "+oldToken {
			t.Fatalf("released %q; want k %s", got, oldToken)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the grant after a refused cancel was not released")
	}
}

// oldToken is the grant oldServer makes.
const oldToken = "0000000000000001a1b2c3d4e5f60718"

// oldServer serves one tagged connection as a server without cancel and
// without sessions would: it refuses the cancel, then grants the waiting
// l, and reports the l on parked and the key and token of each release
// on released.
func oldServer(ln net.Listener, parked chan<- struct{}, released chan<- string) {
	c, err := ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	br := bufio.NewReader(c)
	var waiting string
	for {
		var lines [3]string
		for i := range lines {
			if lines[i], err = br.ReadString('\n'); err != nil {
				return
			}
			lines[i] = strings.TrimSuffix(lines[i], "\n")
		}
		tag, cmd, _ := strings.Cut(lines[0], " ")
		var out string
		switch {
		case lines[0] == "tagged":
			out = "ok\n"
		case cmd == "l":
			waiting = tag
			parked <- struct{}{}
		case cmd == "cancel":
			out = tag + " error\n" + waiting + " ok " + oldToken + " 30\n"
		case cmd == "r":
			released <- lines[1] + " " + lines[2]
			out = tag + " ok\n"
		default:
			out = tag + " error\n"
		}
		if _, err := c.Write([]byte(out)); err != nil {
			return
		}
	}
}
