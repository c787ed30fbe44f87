package client_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
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
