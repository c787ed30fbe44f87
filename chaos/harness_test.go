package chaos

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The harness the chaos run and the rolling-upgrade test share: latchd
// processes on loopback.

// node is one latchd process of the cluster.
type node struct {
	id, addr, raft, dir string
	args                []string
	cmd                 *exec.Cmd
	exited              chan struct{} // closed when cmd has exited
	log                 *os.File
}

func (n *node) start(t *testing.T, bin string) {
	t.Helper()
	cmd := exec.Command(bin, n.args...)
	cmd.Stdout, cmd.Stderr = n.log, n.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", n.id, err)
	}
	n.cmd, n.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(n.exited)
}

// alive reports whether the process runs.
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

// stop sends SIGTERM, the graceful stop (a leader hands over first), and
// waits for the process to exit.
func (n *node) stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	<-n.exited
	n.cmd = nil
}

// kill sends SIGKILL: no graceful shutdown, no handover.
func (n *node) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	n.cmd = nil
}

// probe sends a try-lock on a key no worker uses and reports whether the
// node answered as leader.
func probe(addr string, key string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := fmt.Fprintf(c, "l\n%s\n0 30\n", key); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "ok ") || line == "timeout\n")
}

func env(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}
