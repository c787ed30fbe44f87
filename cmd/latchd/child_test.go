package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testport"
)

// TestMain lets a test re-run this binary as a latchd process (see
// startChild): a child has its own file descriptor limit and gets real
// signals.
func TestMain(m *testing.M) {
	if os.Getenv("LATCHD_TEST_CHILD") == "1" {
		if n, err := strconv.ParseUint(os.Getenv("LATCHD_TEST_NOFILE"), 10, 64); err == nil {
			lim := syscall.Rlimit{Cur: n, Max: n}
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
				fmt.Fprintln(os.Stderr, "setrlimit:", err)
				os.Exit(3)
			}
		}
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv("LATCHD_TEST_ARGS")), &args); err != nil {
			fmt.Fprintln(os.Stderr, "args:", err)
			os.Exit(3)
		}
		os.Exit(run(args, os.Getenv, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// child is a latchd process run from this test binary.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	tcp   string // TCP address
	http  string // REST address, "" when off
	done  chan struct{}
	mu    sync.Mutex
	lines []string // its log
}

// startChild starts latchd with args (its --port and --http-port are
// added) under a descriptor limit of nofile (0: inherited), and waits
// until it listens.
func startChild(t testing.TB, nofile int, rest bool, args ...string) *child {
	t.Helper()
	c := &child{t: t, tcp: freePort(t), done: make(chan struct{})}
	args = append([]string{"--host", "127.0.0.1", "--port", portOf(c.tcp)}, args...)
	if rest {
		c.http = freePort(t)
		args = append(args, "--http-port", portOf(c.http))
	}
	enc, _ := json.Marshal(args)
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	// atexit_sleep_ms: a race-enabled binary otherwise sleeps 1 s on exit.
	c.cmd.Env = append(os.Environ(), "LATCHD_TEST_CHILD=1", "LATCHD_TEST_ARGS="+string(enc), "GORACE=atexit_sleep_ms=0")
	if nofile > 0 {
		c.cmd.Env = append(c.cmd.Env, "LATCHD_TEST_NOFILE="+strconv.Itoa(nofile))
	}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
		}
		_ = c.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
		if t.Failed() {
			t.Logf("child log:\n%s", c.log())
		}
	})
	c.waitReady(10 * time.Second)
	return c
}

// waitReady waits until the TCP port answers a request (and the REST
// port, /healthz).
func (c *child) waitReady(d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ok := false
		if r, err := dialTCP(c.tcp); err == nil {
			a, err := r.do("stats", "_", "_", time.Second)
			ok = err == nil && strings.HasPrefix(a, "ok ")
			_ = r.Close()
		}
		if ok && c.http != "" {
			code, _, err := httpOnce(c.http, "GET", "/healthz", "", "", time.Second)
			ok = err == nil && code == 200
		}
		if ok {
			return
		}
		select {
		case <-c.done:
			c.t.Fatalf("latchd exited at start:\n%s", c.log())
		case <-time.After(10 * time.Millisecond):
		}
	}
	c.t.Fatalf("latchd not ready within %v:\n%s", d, c.log())
}

func (c *child) log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n")
}

// waitLog waits for a log line containing s and returns it.
func (c *child) waitLog(s string, d time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for _, l := range c.lines {
			if strings.Contains(l, s) {
				c.mu.Unlock()
				return l
			}
		}
		c.mu.Unlock()
		select {
		case <-c.done:
			c.t.Fatalf("latchd exited before logging %q:\n%s", s, c.log())
		case <-time.After(5 * time.Millisecond):
		}
	}
	c.t.Fatalf("no %q in the log within %v:\n%s", s, d, c.log())
	return ""
}

// signal sends sig and returns how long the process took to exit, failing
// after limit.
func (c *child) signal(sig os.Signal, limit time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(limit):
		c.t.Fatalf("latchd still running %v after %v", limit, sig)
	}
	return time.Since(start)
}

// freePort is a free loopback address below the ephemeral range, where
// an outgoing connection cannot take it before the child binds it.
func freePort(t testing.TB) string { return testport.Free(t) }

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// rawTCP is one latchd protocol connection.
type rawTCP struct {
	c net.Conn
	r *bufio.Reader
}

func dialTCP(addr string) (*rawTCP, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	return &rawTCP{c: c, r: bufio.NewReader(c)}, nil
}

// do sends one request and reads its answer line within d.
func (r *rawTCP) do(cmd, key, arg string, d time.Duration) (string, error) {
	_ = r.c.SetDeadline(time.Now().Add(d))
	if _, err := fmt.Fprintf(r.c, "%s\n%s\n%s\n", cmd, key, arg); err != nil {
		return "", err
	}
	line, err := r.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// send writes one request without reading.
func (r *rawTCP) send(cmd, key, arg string) error {
	_, err := fmt.Fprintf(r.c, "%s\n%s\n%s\n", cmd, key, arg)
	return err
}

// read reads one answer line within d.
func (r *rawTCP) read(d time.Duration) (string, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(d))
	line, err := r.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

func (r *rawTCP) Close() error { return r.c.Close() }

// rawHTTP is one keep-alive HTTP/1.1 connection.
type rawHTTP struct {
	c net.Conn
	r *bufio.Reader
}

func dialHTTP(addr string) (*rawHTTP, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	return &rawHTTP{c: c, r: bufio.NewReader(c)}, nil
}

// do sends one request (body: JSON or "") and returns the status and body.
func (h *rawHTTP) do(method, path, session, body string, d time.Duration) (int, string, error) {
	_ = h.c.SetDeadline(time.Now().Add(d))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: latchd\r\n", method, path)
	if session != "" {
		fmt.Fprintf(&b, "X-Latchd-Session: %s\r\n", session)
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(h.c, b.String()); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(h.r, nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), err
}

func (h *rawHTTP) Close() error { return h.c.Close() }

// httpOnce sends one request on a fresh connection.
func httpOnce(addr, method, path, session, body string, d time.Duration) (int, string, error) {
	h, err := dialHTTP(addr)
	if err != nil {
		return 0, "", err
	}
	defer h.Close()
	return h.do(method, path, session, body, d)
}
