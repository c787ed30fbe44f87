//go:build soak

package soak_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/latchd/latchd/internal/testport"
	"github.com/latchd/latchd/soak"
)

// fdLimit is the descriptor limit the server is given under attack.
const fdLimit = 128

// fdRounds is how many times the attack exhausts the server's descriptors.
const fdRounds = 3

// TestFDExhaustionSparesBystanders runs latchd as its own process (its
// descriptor limit is its own), lowers its RLIMIT_NOFILE to 128 with
// prlimit, as an operator or a leak would, and floods both listeners with
// connections several times while bystanders hold locks and keep working.
// Each round /healthz must turn 503, the bystanders must be served, and
// once the flood closes both listeners must accept again (the time is
// reported). Before latchd owned its accept loop, the first EMFILE shut
// gnet's engine down: every client dropped, no connection ever accepted
// again, /healthz still 200.
func TestFDExhaustionSparesBystanders(t *testing.T) {
	cfg := config(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "latchd")
	build := exec.Command("go", "build", "-o", bin, "../cmd/latchd")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build: %v", err)
	}
	tcpAddr, httpAddr := freeAddr(t), freeAddr(t)
	logf, err := os.Create(filepath.Join(dir, "latchd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--host", "127.0.0.1", "--port", portOf(tcpAddr), "--http-port", portOf(httpAddr),
		"--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			raw, _ := os.ReadFile(logf.Name())
			t.Logf("latchd log:\n%s", raw)
		}
	})
	if !soak.PollUntil(10*time.Second, func() bool { return healthz(httpAddr, nil) == 200 }) {
		t.Fatal("latchd did not start")
	}
	rep := soak.NewReport(fmt.Sprintf("descriptor exhaustion (limit %d) beside well-behaved clients (%s)", fdLimit, cfg.Name))
	by, err := soak.StartBystanders(tcpAddr, cfg.Bystanders)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(by.Close)
	if !soak.PollUntil(30*time.Second, func() bool { return by.Ops(0) >= 40*cfg.Bystanders }) {
		t.Fatalf("bystanders made %d operations in 30 s", by.Ops(0))
	}
	// A monitor's keep-alive connection, opened before the attack.
	monitor := &http.Client{Timeout: 2 * time.Second,
		Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}}
	if code := healthz(httpAddr, monitor); code != 200 {
		t.Fatalf("healthz before: %d", code)
	}
	if err := prlimitNoFile(cmd.Process.Pid, fdLimit); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	by.Phase(1)
	var downV, recV []soak.Violation
	var recovery []time.Duration
	for round := range fdRounds {
		flood := openMany(tcpAddr, 2*fdLimit)
		flood = append(flood, openMany(httpAddr, 2*fdLimit)...)
		if !soak.PollUntil(10*time.Second, func() bool { return healthz(httpAddr, monitor) == 503 }) {
			downV = append(downV, soak.Violation{Check: "healthz", Detail: fmt.Sprintf(
				"round %d: /healthz not 503 with %d flood connections open", round, len(flood))})
		}
		time.Sleep(500 * time.Millisecond) // the bystanders work on, out of descriptors
		for _, c := range flood {
			_ = c.Close()
		}
		start := time.Now()
		// One new TCP client served, then /healthz alone: a balancer that
		// reads 503 sends no client that would wake the TCP accept.
		tcpOK := false
		if !soak.PollUntil(10*time.Second, func() bool {
			tcpOK = tcpOK || freshLock(tcpAddr)
			return tcpOK && healthz(httpAddr, nil) == 200
		}) {
			recV = append(recV, soak.Violation{Check: "accept", Detail: fmt.Sprintf(
				"round %d: not accepting 10 s after the flood closed", round)})
			continue
		}
		recovery = append(recovery, time.Since(start))
	}
	by.Stop()
	rep.Add("/healthz 503 while out of descriptors", fmt.Sprintf("%d rounds of %d TCP + %d REST connections", fdRounds, 2*fdLimit, 2*fdLimit),
		fmt.Sprintf("%d of %d rounds", fdRounds-len(downV), fdRounds), downV)
	rep.Add("listeners accept again", "new TCP lock and REST /healthz 200 after the flood closes",
		fmt.Sprintf("recovery %v", recovery), recV)
	scrape := ""
	if resp, err := monitor.Get("http://" + httpAddr + "/metrics"); err == nil {
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		scrape = string(raw)
	}
	var cntV []soak.Violation
	tcpErr, httpErr := acceptErrors(scrape, "tcp"), acceptErrors(scrape, "http")
	if tcpErr == 0 || httpErr == 0 {
		cntV = append(cntV, soak.Violation{Check: "metrics", Detail: fmt.Sprintf("accept errors tcp %v http %v", tcpErr, httpErr)})
	}
	rep.Add("latchd_accept_errors_total", "counted per listener", fmt.Sprintf("tcp %v, http %v", tcpErr, httpErr), cntV)

	p50, p99, worst, ops, alive, byV := by.Result()
	rep.Add("bystanders' requests", fmt.Sprintf("%d bystanders, %d ops before, %d during", cfg.Bystanders, ops[0], ops[1]),
		"every answer as expected", byV)
	var keptV []soak.Violation
	if alive != cfg.Bystanders {
		keptV = append(keptV, soak.Violation{Check: "bystanders", Detail: fmt.Sprintf("%d of %d hold locks survived", alive, cfg.Bystanders)})
	}
	rep.Add("bystanders keep their locks", fmt.Sprintf("%d locks renewed after", cfg.Bystanders), fmt.Sprintf("%d kept", alive), keptV)
	var latV []soak.Violation
	if p99[1] > cfg.P99Bound {
		latV = append(latV, soak.Violation{Check: "bystanders", Detail: fmt.Sprintf("p99 %v during the attack, bound %v", p99[1], cfg.P99Bound)})
	}
	rep.Add("bystanders keep their latency", fmt.Sprintf("p99 <= %v", cfg.P99Bound), fmt.Sprintf(
		"before p50 %v p99 %v max %v; during p50 %v p99 %v max %v",
		p50[0].Round(10*time.Microsecond), p99[0].Round(10*time.Microsecond), worst[0].Round(10*time.Microsecond),
		p50[1].Round(10*time.Microsecond), p99[1].Round(10*time.Microsecond), worst[1].Round(10*time.Microsecond)), latV)
	if ops[1] == 0 {
		t.Errorf("bystanders made no request during the attack")
	}
	finish(t, rep)
}

// prlimitNoFile sets another process's RLIMIT_NOFILE, as prlimit(1) does.
func prlimitNoFile(pid int, n uint64) error {
	lim := unix.Rlimit{Cur: n, Max: n}
	return unix.Prlimit(pid, unix.RLIMIT_NOFILE, &lim, nil)
}

// openMany opens up to n connections to addr; the kernel completes them
// into the listen backlog whether or not the server accepts.
func openMany(addr string, n int) []net.Conn {
	var cs []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		cs = append(cs, c)
	}
	return cs
}

// healthz returns /healthz's status code (0 on error), on c or on a fresh
// connection when c is nil.
func healthz(addr string, c *http.Client) int {
	if c == nil {
		c = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// freshLock reports whether a new TCP connection gets a lock and releases
// it.
func freshLock(addr string) bool {
	c, err := soak.Dial(addr)
	if err != nil {
		return false
	}
	defer c.Close()
	line, err := c.Do("l", "fd-fresh", "0 5", time.Now().Add(time.Second))
	a, perr := soak.ParseAnswer(line)
	if err != nil || perr != nil || !a.Grant() {
		return false
	}
	line, err = c.Do("r", "fd-fresh", a.Token, time.Now().Add(time.Second))
	return err == nil && line == "ok"
}

// acceptErrors sums latchd_accept_errors_total{listener=name} in a scrape.
func acceptErrors(scrape, name string) float64 {
	re := regexp.MustCompile(`(?m)^latchd_accept_errors_total\{listener="` + name + `",reason="[a-z]+"\} ([0-9.e+]+)$`)
	total := 0.0
	for _, m := range re.FindAllStringSubmatch(scrape, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		total += v
	}
	return total
}

// freeAddr is a free loopback address below the ephemeral range, where an
// outgoing connection cannot take it before the child binds it.
func freeAddr(t *testing.T) string { return testport.Free(t) }

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return strings.TrimSpace(p)
}
