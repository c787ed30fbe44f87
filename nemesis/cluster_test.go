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
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	clientPort = "7000"
	httpPort   = "7080"
	raftPort   = "7100"
)

// adminToken opens the nodes' admin API.
const adminToken = "nemesis-admin-token"

// node is one latchd process, run in its own namespace. A node replaced
// by a membership change keeps its namespace and disk under a new id.
type node struct {
	id, ns, ip, dir string
	idx             int // its namespace's index in the topology
	gen             int // how many times it was replaced
	args            []string
	cmd             *exec.Cmd
	exited          chan struct{} // closed when cmd has exited
	log             *os.File
}

func (n *node) addr() string { return n.ip + ":" + clientPort }

func (n *node) httpAddr() string { return n.ip + ":" + httpPort }

func (n *node) raftAddr() string { return n.ip + ":" + raftPort }

// cluster is the nodes and a dialer in the clients' namespace.
type cluster struct {
	t     *testing.T
	bin   string
	ctl   string // latchctl
	nodes []*node
	dial  *nsDialer
	topo  *topo
	dir   string // the run's temporary directory

	probeOnce sync.Once
	shapeOnce sync.Once
	mu        sync.Mutex
	notes     []string        // anomalies a fault found while it ran
	margins   []time.Duration // run-under-lock margins
	mux       muxLoad         // the Mux workload (mux_test.go)
}

// note records an anomaly found by a fault itself.
func (c *cluster) note(format string, args ...any) {
	c.mu.Lock()
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

// takeNotes returns the anomalies noted since the last call.
func (c *cluster) takeNotes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.notes
	c.notes = nil
	return n
}

// build builds ./cmd/<name> into dir.
func build(t *testing.T, dir, name string) string {
	bin := filepath.Join(dir, name)
	b := exec.Command("go", "build", "-o", bin, "../cmd/"+name)
	b.Stdout, b.Stderr = os.Stdout, os.Stderr
	if err := b.Run(); err != nil {
		t.Fatalf("build %s: %v", name, err)
	}
	return bin
}

// newCluster starts one node per namespace of tp, each with its data on
// a loop-device filesystem of its own, and returns once they are started.
func newCluster(t *testing.T, tp *topo, bin, dir string, dial *nsDialer) *cluster {
	c := &cluster{t: t, bin: bin, dial: dial, dir: dir}
	var peers []string
	for i, ns := range tp.nodeNS {
		n := &node{id: fmt.Sprint("n", i+1), ns: ns, ip: tp.nodeIP[i], dir: filepath.Join(dir, fmt.Sprint("n", i+1)), idx: i}
		c.nodes = append(c.nodes, n)
		peers = append(peers, n.id+"="+n.raftAddr()+"="+n.addr())
	}
	t.Cleanup(c.stopAll)
	for _, n := range c.nodes {
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := tp.mountLoop(n.dir, fmt.Sprint("d", n.idx+1), imgSize); err != nil {
			t.Skipf("nemesis: skipped, cannot make a loop-device filesystem here: %v", err)
		}
		if n.idx == 0 {
			if err := tp.canThrottle(tp.loops[0].dev); err != nil {
				t.Skipf("nemesis: skipped, cannot throttle a disk's writes here (the slow-disk faults need it): %v", err)
			}
		}
		n.args = nodeArgs(n, bin, "--bootstrap", "--cluster-peers", strings.Join(peers, ","))
		f, err := os.Create(filepath.Join(dir, n.id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		n.log = f
		c.start(n)
	}
	return c
}

// nodeArgs is the command line that runs n with latchd bin, and extra.
func nodeArgs(n *node, bin string, extra ...string) []string {
	return append([]string{"netns", "exec", n.ns, bin, "--host", n.ip, "--port", clientPort,
		"--http-port", httpPort, "--raft-dir", n.dir, "--node-id", n.id, "--raft-addr", n.raftAddr(),
		"--admin-token", adminToken,
		"--auto-release-on-disconnect=false", "--log-level", "warn", "--raft-log-level", "warn"}, extra...)
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

// get fetches path from n's REST port, from the clients' namespace (with
// the admin token when admin), and returns the status and body.
func (c *cluster) get(n *node, path string, admin bool) (int, []byte, error) {
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, _, addr string) (net.Conn, error) { return c.dial.Dial(addr) },
	}}
	req, err := http.NewRequest("GET", "http://"+n.httpAddr()+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if admin {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// readyz returns n's GET /readyz answer, fetched from the clients'
// namespace, or the error.
func (c *cluster) readyz(n *node) string {
	code, b, err := c.get(n, "/readyz", false)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(code, " ", strings.TrimSpace(string(b)))
}

// latchctl runs latchctl with args in the clients' namespace, against
// every node's REST port, and returns its output.
func (c *cluster) latchctl(args ...string) (string, error) {
	var https []string
	for _, n := range c.nodes {
		https = append(https, n.httpAddr())
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", c.topo.client, c.ctl}, args...)...)
	cmd.Env = append(os.Environ(), "LATCHD_ADMIN_TOKEN="+adminToken, "LATCHD_HTTP="+strings.Join(https, ","))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("latchctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
