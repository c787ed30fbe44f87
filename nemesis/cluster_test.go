//go:build nemesis

package nemesis

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	clientPort = "7000"
	httpPort   = "7080"
	raftPort   = "7100"
)

// node is one latchd process, run in its own namespace.
type node struct {
	id, ns, ip, dir string
	args            []string
	cmd             *exec.Cmd
	exited          chan struct{} // closed when cmd has exited
	log             *os.File
}

func (n *node) addr() string { return n.ip + ":" + clientPort }

// cluster is the nodes and a dialer in the clients' namespace.
type cluster struct {
	t     *testing.T
	bin   string
	nodes []*node
	dial  *nsDialer
	topo  *topo
}

// buildLatchd builds ./cmd/latchd into dir.
func buildLatchd(t *testing.T, dir string) string {
	bin := filepath.Join(dir, "latchd")
	build := exec.Command("go", "build", "-o", bin, "../cmd/latchd")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build latchd: %v", err)
	}
	return bin
}

// newCluster starts one node per namespace of tp, each with its data on
// a tmpfs of its own, and returns once they are started.
func newCluster(t *testing.T, tp *topo, bin, dir string, dial *nsDialer) *cluster {
	c := &cluster{t: t, bin: bin, dial: dial}
	var peers []string
	for i, ns := range tp.nodeNS {
		n := &node{id: fmt.Sprint("n", i+1), ns: ns, ip: tp.nodeIP[i], dir: filepath.Join(dir, fmt.Sprint("n", i+1))}
		c.nodes = append(c.nodes, n)
		peers = append(peers, n.id+"="+n.ip+":"+raftPort+"="+n.addr())
	}
	t.Cleanup(c.stopAll)
	for _, n := range c.nodes {
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := tp.mountTmpfs(n.dir, n.id, 256<<20); err != nil {
			t.Fatal(err)
		}
		n.args = []string{"netns", "exec", n.ns, bin, "--host", n.ip, "--port", clientPort,
			"--http-port", httpPort, "--raft-dir", n.dir, "--node-id", n.id, "--raft-addr", n.ip + ":" + raftPort,
			"--bootstrap", "--cluster-peers", strings.Join(peers, ","),
			"--auto-release-on-disconnect=false", "--log-level", "warn", "--raft-log-level", "warn"}
		f, err := os.Create(filepath.Join(dir, n.id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		n.log = f
		c.start(n)
	}
	return c
}

// start runs n. "ip netns exec" execs latchd in place, so the process is
// latchd itself and signals reach it directly.
func (c *cluster) start(n *node) {
	cmd := exec.Command("ip", n.args...)
	cmd.Stdout, cmd.Stderr = n.log, n.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no node outlives the test
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", n.id, err)
	}
	n.cmd, n.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(n.exited)
}

func (n *node) alive() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

func (n *node) signal(s syscall.Signal) {
	if n.alive() {
		_ = n.cmd.Process.Signal(s)
	}
}

// kill sends SIGKILL (after SIGCONT, in case it was paused) and waits.
func (n *node) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	_ = n.cmd.Process.Signal(syscall.SIGCONT)
	<-n.exited
	n.cmd = nil
}

func (c *cluster) stopAll() {
	for _, n := range c.nodes {
		n.kill()
		if n.log != nil {
			_ = n.log.Close()
			if c.t.Failed() {
				b, _ := os.ReadFile(n.log.Name())
				if len(b) > 3000 {
					b = b[len(b)-3000:]
				}
				c.t.Logf("%s log (tail):\n%s", n.id, b)
			}
		}
	}
}

// probe sends a try-lock on a key no worker uses, from the clients'
// namespace, and reports whether n answered as a leader that can commit.
func (c *cluster) probe(n *node, key string) bool {
	conn, err := c.dial.Dial(n.addr())
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := fmt.Fprintf(conn, "l\n%s\n0 30\n", key); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "ok ") || line == "timeout\n")
}

// leader waits until a node other than skip (-1: any) grants a probe,
// polling every node at once, and returns its index, or -1 past timeout.
func (c *cluster) leader(skip func() int, timeout time.Duration) int {
	end := time.Now().Add(timeout)
	for i := 0; time.Now().Before(end); i++ {
		found := make(chan int, len(c.nodes))
		for j, n := range c.nodes {
			go func() {
				if j != skip() && n.alive() && c.probe(n, fmt.Sprintf("nemesis-probe-%d-%d", i, j)) {
					found <- j
					return
				}
				found <- -1
			}()
		}
		best := -1
		for range c.nodes {
			if j := <-found; j >= 0 && best < 0 {
				best = j
			}
		}
		if best >= 0 {
			return best
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

func noSkip() int { return -1 }

// readyz returns n's GET /readyz answer, fetched from the clients'
// namespace, or the error.
func (c *cluster) readyz(n *node) string {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, _, addr string) (net.Conn, error) { return c.dial.Dial(addr) },
	}}
	resp, err := hc.Get("http://" + n.ip + ":" + httpPort + "/readyz")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.Status + " " + strings.TrimSpace(string(b))
}
