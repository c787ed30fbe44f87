//go:build nemesis

package nemesis

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// fault is one kind of failure. inject starts it against the cluster
// whose leader is node l and returns what heals it, the node it targets,
// and whether that node is the leader (then failover is measured to a
// grant from another node).
type fault struct {
	name   string
	inject func(c *cluster, tp *topo, l int) (heal func() error, target int, err error)
}

var faults = []fault{
	{"leader isolated (link down)", isolate},
	{"partition, leader in minority", func(c *cluster, tp *topo, l int) (func() error, int, error) {
		return partition(tp, l)
	}},
	{"partition, follower in minority", func(c *cluster, tp *topo, l int) (func() error, int, error) {
		return partition(tp, (l+1)%len(tp.nodeNS))
	}},
	{"one-way loss from leader", oneWay},
	{"leader paused past election", pause},
	{"leader kill -9, restart", kill},
	{"full disk on leader", fullDisk},
	{"full disk on follower", func(c *cluster, tp *topo, l int) (func() error, int, error) {
		return fullDisk(c, tp, (l+1)%len(c.nodes))
	}},
}

// isolate takes the leader's link down: no peer and no client reaches it.
func isolate(c *cluster, tp *topo, l int) (func() error, int, error) {
	if err := run("ip", "link", "set", tp.hostIf[l], "down"); err != nil {
		return nil, l, err
	}
	return func() error { return run("ip", "link", "set", tp.hostIf[l], "up") }, l, nil
}

// prohibit makes node from unable to send to node to, inside from's
// namespace; it still receives.
func prohibit(tp *topo, from, to int) (func() error, error) {
	dst := tp.nodeIP[to] + "/32"
	if err := run("ip", "-n", tp.nodeNS[from], "route", "add", "prohibit", dst); err != nil {
		return nil, err
	}
	return func() error { return run("ip", "-n", tp.nodeNS[from], "route", "del", "prohibit", dst) }, nil
}

// cut applies prohibit for every pair, and heals them all.
func cut(tp *topo, pairs [][2]int) (func() error, error) {
	var heals []func() error
	heal := func() error {
		var errs []error
		for _, h := range heals {
			errs = append(errs, h())
		}
		return errors.Join(errs...)
	}
	for _, p := range pairs {
		h, err := prohibit(tp, p[0], p[1])
		if err != nil {
			return nil, errors.Join(err, heal())
		}
		heals = append(heals, h)
	}
	return heal, nil
}

// partition cuts node m off from the other nodes both ways; clients
// still reach every node.
func partition(tp *topo, m int) (func() error, int, error) {
	var pairs [][2]int
	for j := range tp.nodeNS {
		if j != m {
			pairs = append(pairs, [2]int{m, j}, [2]int{j, m})
		}
	}
	heal, err := cut(tp, pairs)
	return heal, m, err
}

// oneWay stops the leader from sending to its peers while it still
// hears them.
func oneWay(c *cluster, tp *topo, l int) (func() error, int, error) {
	var pairs [][2]int
	for j := range tp.nodeNS {
		if j != l {
			pairs = append(pairs, [2]int{l, j})
		}
	}
	heal, err := cut(tp, pairs)
	return heal, l, err
}

// pause stops the leader with SIGSTOP for the hold, past the election
// timeout, then continues it.
func pause(c *cluster, tp *topo, l int) (func() error, int, error) {
	n := c.nodes[l]
	n.signal(syscall.SIGSTOP)
	return func() error { n.signal(syscall.SIGCONT); return nil }, l, nil
}

// kill kill -9s the leader and restarts it at heal.
func kill(c *cluster, tp *topo, l int) (func() error, int, error) {
	n := c.nodes[l]
	n.kill()
	return func() error { c.start(n); return nil }, l, nil
}

// fullDisk fills node l's data tmpfs to the last byte. Heal deletes the
// filler and then does what the operator guide says: a node whose
// /readyz reports a failed log write is restarted (as is one that
// exited).
func fullDisk(c *cluster, tp *topo, l int) (func() error, int, error) {
	n := c.nodes[l]
	p := filepath.Join(n.dir, "nemesis-filler")
	f, err := os.Create(p)
	if err != nil {
		return nil, l, err
	}
	for _, size := range []int{1 << 20, 4096} { // to the last page
		buf := make([]byte, size)
		for err == nil {
			_, err = f.Write(buf)
		}
		if errors.Is(err, syscall.ENOSPC) && size > 4096 {
			err = nil
		}
	}
	_ = f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		return nil, l, fmt.Errorf("fill %s: %w", p, err)
	}
	return func() error {
		err := os.Remove(p)
		if ready := c.readyz(n); !n.alive() || strings.Contains(ready, "raft log failed") {
			c.t.Logf("full disk: restarting %s (readyz: %s)", n.id, ready)
			n.kill()
			c.start(n)
		}
		return err
	}, l, nil
}
