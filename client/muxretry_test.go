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
	"github.com/latchd/latchd/server"
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

// keyLines returns the key lines of the tagged requests written, but for
// session requests and the Mux's probe of the server (muxdedup.go).
func (r *recorder) keyLines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := bytes.Split(r.out.Bytes(), []byte("\n"))
	var keys []string
	for i := 0; i+2 < len(lines); i += 3 {
		_, cmd, _ := bytes.Cut(lines[i], []byte(" "))
		if !bytes.HasPrefix(lines[i], []byte("#")) || bytes.HasPrefix(cmd, []byte("session")) ||
			bytes.HasPrefix(lines[i+1], []byte("latchd-dedup-probe.")) {
			continue
		}
		keys = append(keys, string(lines[i+1]))
	}
	return keys
}

// TestMuxRequestIDs: a Mux acting for a session on a cluster sends a
// request id with every acquire, wait, enqueue, release, renewal and set;
// one without a session, or on a single node (which takes nothing over
// by id), sends none: its key lines are the plain protocol's.
func TestMuxRequestIDs(t *testing.T) {
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		ServerEdit: func(cfg *server.Config) { cfg.OrphanTTL = 5 * time.Second }})
	leader := c.Members()[c.Leader(servertest.LeaderTimeout)].Addr
	for _, tc := range []struct {
		name      string
		addr      string
		sess, ids bool
	}{
		{"single node without sessions", servertest.StartServer(t, orphanTTL(0)).Addr, false, false},
		{"single node with a session", servertest.StartServer(t, orphanTTL(5*time.Second)).Addr, true, false},
		{"cluster", leader, true, true},
	} {
		sess, keys := muxKeyLines(t, tc.addr)
		if sess != tc.sess {
			t.Fatalf("%s: a session: %v; want %v", tc.name, sess, tc.sess)
		}
		want := []string{"k", "k", "k", "e", "e", "a b"}
		if len(keys) != len(want) {
			t.Fatalf("%s: key lines %q", tc.name, keys)
		}
		for i, k := range keys {
			bare, id, found := bytes.Cut([]byte(k), []byte(" @"))
			if string(bare) != want[i] || found != tc.ids || found && len(id) == 0 {
				t.Fatalf("%s: key line %q; want %q with an id: %v", tc.name, k, want[i], tc.ids)
			}
		}
	}
}

// muxKeyLines runs an acquire, renewal, release, enqueue, wait and set
// over a Mux to addr, and returns whether it had a session and the key
// lines it wrote for them.
func muxKeyLines(t *testing.T, addr string) (bool, []string) {
	t.Helper()
	var rec recorder
	ctx := context.Background()
	m, err := client.DialMux(ctx, []string{addr}, 1, client.WithDialer(rec.dial))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
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
	return m.Session() != "", rec.keyLines()
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
