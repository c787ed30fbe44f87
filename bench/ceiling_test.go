package bench

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestCeilingAnswer(t *testing.T) {
	long := strings.Repeat("k", 300)
	tests := []struct {
		name    string
		in      string
		wantAns string
		wantAdv int
		wantOK  bool
	}{
		{name: "lock", in: "l\nk\n10\n", wantAns: "ok " + CeilingToken + " 33\n", wantAdv: 7, wantOK: true},
		{name: "sem lock CRLF", in: "sl\r\nk\r\n10 3\r\n", wantAns: "ok " + CeilingToken + " 33\n", wantAdv: 13, wantOK: true},
		{name: "wait", in: "w\nk\n1\n", wantAns: "ok " + CeilingToken + " 33\n", wantAdv: 6, wantOK: true},
		{name: "release", in: "r\nk\ntok\n", wantAns: "ok\n", wantAdv: 8, wantOK: true},
		{name: "enqueue", in: "e\nk\n\n", wantAns: "acquired " + CeilingToken + " 33\n", wantAdv: 5, wantOK: true},
		{name: "renew", in: "sn\nk\ntok 5\n", wantAns: "ok 33\n", wantAdv: 11, wantOK: true},
		{name: "stats", in: "stats\n_\n\n", wantAns: string(ceilStats), wantAdv: 9, wantOK: true},
		{name: "only the first of two", in: "r\nk\nt\nr\nk\nt\n", wantAns: "ok\n", wantAdv: 6, wantOK: true},
		{name: "incomplete", in: "l\nk\n10", wantOK: true},
		{name: "empty", in: "", wantOK: true},
		{name: "unknown command", in: "x\nk\n1\n"},
		{name: "long line", in: "l\n" + long + "\n1\n"},
		{name: "long partial line", in: "l\n" + long},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ans, adv, ok := ceilingAnswer([]byte(tt.in))
			if string(ans) != tt.wantAns || adv != tt.wantAdv || ok != tt.wantOK {
				t.Fatalf("ceilingAnswer(%q) = %q, %d, %v; want %q, %d, %v", tt.in, ans, adv, ok, tt.wantAns, tt.wantAdv, tt.wantOK)
			}
		})
	}
}

func startCeiling(t *testing.T) *Ceiling {
	t.Helper()
	c, err := StartCeiling(CeilingConfig{Addr: "127.0.0.1:0", EventLoops: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func dialT(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn, bufio.NewReader(conn)
}

func TestCeilingServes(t *testing.T) {
	c := startCeiling(t)
	if _, port, _ := net.SplitHostPort(c.Addr()); port == "0" || port == "" {
		t.Fatalf("Addr() = %q; want the bound port", c.Addr())
	}
	conn, rd := dialT(t, c.Addr())

	// Pipelined requests in one write, the last one split across writes.
	if _, err := io.WriteString(conn, "l\nk\n10\nr\nk\n"+CeilingToken+"\ne\nk\n\nsn\nk\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "tok\n"); err != nil {
		t.Fatal(err)
	}
	want := []string{"ok " + CeilingToken + " 33\n", "ok\n", "acquired " + CeilingToken + " 33\n", "ok 33\n"}
	for i, w := range want {
		got, err := rd.ReadString('\n')
		if err != nil || got != w {
			t.Fatalf("answer %d = %q, %v; want %q", i, got, err, w)
		}
	}
	if n := c.Requests(); n != 4 {
		t.Fatalf("Requests() = %d; want 4", n)
	}
	if n := c.Connections(); n != 1 {
		t.Fatalf("Connections() = %d; want 1", n)
	}

	// A protocol violation gets "error" and a close.
	if _, err := io.WriteString(conn, "bogus\nk\n1\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := rd.ReadString('\n'); err != nil || got != "error\n" {
		t.Fatalf("violation answer = %q, %v; want \"error\\n\"", got, err)
	}
	if _, err := rd.ReadString('\n'); err != io.EOF {
		t.Fatalf("after a violation: read error %v; want EOF", err)
	}
}

func TestCeilingConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     CeilingConfig
		wantErr bool
	}{
		{name: "default", cfg: DefaultCeilingConfig()},
		{name: "no port", cfg: CeilingConfig{Addr: "127.0.0.1"}, wantErr: true},
		{name: "negative loops", cfg: CeilingConfig{Addr: "127.0.0.1:0", EventLoops: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v; want error %v", err, tt.wantErr)
			}
		})
	}
}
