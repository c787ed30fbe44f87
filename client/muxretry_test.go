package client_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// recorder is a dialer that keeps what the client writes.
type recorder struct {
	mu  sync.Mutex
	out bytes.Buffer
}

type recordedConn struct {
	net.Conn
	r *recorder
}

func (c recordedConn) Write(b []byte) (int, error) {
	c.r.mu.Lock()
	c.r.out.Write(b)
	c.r.mu.Unlock()
	return c.Conn.Write(b)
}

func (r *recorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return recordedConn{c, r}, nil
}

// keyLines returns the key lines of the tagged requests written.
func (r *recorder) keyLines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := bytes.Split(r.out.Bytes(), []byte("\n"))
	var keys []string
	for i := 0; i+2 < len(lines); i += 3 {
		if bytes.HasPrefix(lines[i], []byte("#")) {
			keys = append(keys, string(lines[i+1]))
		}
	}
	return keys
}

// TestMuxRequestIDs: a Mux acting for a session sends a request id with
// every acquire, wait, enqueue, release, renewal and set; one without a
// session sends none (its key lines are the plain protocol's).
func TestMuxRequestIDs(t *testing.T) {
	for _, sess := range []bool{false, true} {
		ttl := time.Duration(0) // no sessions
		if sess {
			ttl = 5 * time.Second
		}
		srv := servertest.StartServer(t, orphanTTL(ttl))
		var rec recorder
		ctx := context.Background()
		m, err := client.DialMux(ctx, []string{srv.Addr}, 1, client.WithDialer(rec.dial))
		if err != nil {
			t.Fatal(err)
		}
		if (m.Session() != "") != sess {
			t.Fatalf("session %q; want one: %v", m.Session(), sess)
		}
		g, err := m.Acquire(ctx, "k", time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Renew(ctx, "k", g.Token, 0); err != nil {
			t.Fatal(err)
		}
		if err := m.Release(ctx, "k", g.Token); err != nil {
			t.Fatal(err)
		}
		if _, acquired, err := m.Enqueue(ctx, "e", 0); err != nil || !acquired {
			t.Fatal(acquired, err)
		}
		if _, err := m.Wait(ctx, "e", time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := m.AcquireMany(ctx, []string{"a", "b"}, time.Second, 0); err != nil {
			t.Fatal(err)
		}
		_ = m.Close()
		want := []string{"k", "k", "k", "e", "e", "a b"}
		keys := rec.keyLines()[1:] // after the session's opening
		if sess {
			keys = keys[:len(keys)-1] // and before its close
		}
		if len(keys) != len(want) {
			t.Fatalf("session %v: key lines %q", sess, keys)
		}
		for i, k := range keys {
			bare, id, found := bytes.Cut([]byte(k), []byte(" @"))
			if string(bare) != want[i] || found != sess || found && len(id) == 0 {
				t.Fatalf("session %v: key line %q; want %q with an id: %v", sess, k, want[i], sess)
			}
		}
	}
}

// TestMuxSingleNodeWaitWithdrawn: a single node keeps a tagged session's
// wait through a broken connection but takes nothing over by request id.
// A Mux whose waiting acquire loses its connection there returns the
// error and withdraws the wait on its next connection (it does not wait
// a second time): once the holder releases, the key is free, not held
// for a session nobody answers for.
func TestMuxSingleNodeWaitWithdrawn(t *testing.T) {
	srv := servertest.StartServer(t, orphanTTL(20*time.Second))
	ctx := context.Background()
	var gt gate
	h := dialMux(t, []string{srv.Addr})
	m := dialMux(t, []string{srv.Addr}, client.WithDialer(gt.dial))
	hg, err := h.Acquire(ctx, "k", 0, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lock := func() (held bool, waiters int) {
		st, err := h.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range st.Locks {
			if l.Key == "k" {
				return true, l.Waiters
			}
		}
		return false, 0
	}
	ch := acquireAsync(m, "k")
	testutil.Eventually(t, 10*time.Second, func() bool { _, w := lock(); return w == 1 }, "waiter queued")
	gt.cut()
	gt.open()
	select {
	case r := <-ch:
		if !errors.Is(r.err, client.ErrClosed) {
			t.Fatalf("acquire through a broken connection: %v, %v; want ErrClosed", r.g, r.err)
		}
	case <-time.After(40 * time.Second): // a guard against a hang, not a bound
		t.Fatal("no answer")
	}
	testutil.Eventually(t, 10*time.Second, func() bool { _, w := lock(); return w == 0 }, "the wait withdrawn")
	if err := h.Release(ctx, "k", hg.Token); err != nil {
		t.Fatal(err)
	}
	if held, w := lock(); held {
		t.Fatalf("after the holder's release: held, %d waiters; want free", w)
	}
}
