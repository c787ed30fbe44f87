package httpfast

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMaxConnectionsPerIP: one client address that opens idle (or
// slowloris) connections up to its cap is refused past it with 429, and
// the REST API, /healthz included, still answers another address. Before,
// 4,700 idle connections from one host took every slot of
// --http-max-connections: /healthz answered fasthttp's 503 to everyone
// (a supervisor would restart latchd and drop every lock).
func TestMaxConnectionsPerIP(t *testing.T) {
	const perIP = 5
	h := startHTTP(t, func(c *Config) {
		c.MaxConnections = 4 * perIP
		c.MaxConnectionsPerIP = perIP
	})
	dial := func(src string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
		c, err := d.Dial("tcp", h.srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	get := func(c net.Conn) string {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return err.Error()
		}
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err.Error()
		}
		_ = r.Body.Close()
		return r.Status
	}
	// The attacker: idle connections, then one with a partial request.
	for range perIP - 1 {
		c := dial("127.0.0.2")
		if s := get(c); !strings.HasPrefix(s, "200") {
			t.Fatalf("attacker connection under the cap: %s", s)
		}
	}
	_, _ = dial("127.0.0.2").Write([]byte("GET /heal"))
	time.Sleep(50 * time.Millisecond) // let the server take the partial request
	for i := range 2 * perIP {
		if s := get(dial("127.0.0.2")); !strings.HasPrefix(s, "429") && !strings.Contains(s, "reset") && !strings.Contains(s, "EOF") {
			t.Fatalf("attacker connection %d over the cap: %s; want refused (429)", perIP+i, s)
		}
	}
	for range perIP {
		if s := get(dial("127.0.0.3")); !strings.HasPrefix(s, "200") {
			t.Fatalf("another address: %s; want 200 while the first is at its cap", s)
		}
	}
}
