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
// whose leader is node l and returns what heals it and the node it
// targets. When the target is the leader, failover is measured to a grant
// from another node, which must come within the hold, unless keeps is
// set: the leader may go on leading through the fault (a slow link or
// disk, a flapping partition), and failover is the gap until any node
// grants. kills: the fault stops the target itself. slowStart: the fault
// takes a while to put in place (filling a disk), and failover counts
// from when it is in place rather than from when it began.
type fault struct {
	name      string
	inject    func(c *cluster, tp *topo, l int) (heal func() error, target int, err error)
	keeps     bool
	kills     bool
	slowStart bool
}

// rel returns f applied to the node rel places after the leader.
func rel(n int, f func(tp *topo, i int) (func() error, int, error)) func(*cluster, *topo, int) (func() error, int, error) {
	return func(c *cluster, tp *topo, l int) (func() error, int, error) { return f(tp, (l+n)%len(c.nodes)) }
}

// faults is the matrix, in the order a run injects them: the first
// dozen, which a short run covers, mix every kind.
var faults = []fault{
	{name: "leader isolated (link down)", inject: isolate},
	{name: "latency+loss on leader link", inject: slowLink(0), keeps: true},
	{name: "bridge: leader-follower cut", inject: bridgePartition, keeps: true},
	{name: "flapping leader partition", inject: flap, keeps: true},
	{name: "slow disk on leader", inject: slowDisk(0), keeps: true},
	{name: "leadership transfer", inject: transfer},
	{name: "voter replaced (learner)", inject: replace, keeps: true},
	{name: "run-under-lock, leader cut", inject: runUnderLock},
	{name: "leader partitioned+paused", inject: pausePartition},
	{name: "slow follower disk+leader kill", inject: slowDiskKill, kills: true},
	{name: "partition, leader in minority", inject: rel(0, partition)},
	{name: "partition, follower minority", inject: rel(1, partition), keeps: true},
	{name: "one-way loss from leader", inject: oneWay},
	{name: "leader paused past election", inject: pause},
	{name: "leader kill -9, restart", inject: kill, kills: true},
	{name: "full disk on leader", inject: fullDisk, slowStart: true},
	{name: "full disk on follower", inject: func(c *cluster, tp *topo, l int) (func() error, int, error) {
		return fullDisk(c, tp, (l+1)%len(c.nodes))
	}, keeps: true, slowStart: true},
	{name: "slow disk on follower", inject: slowDisk(1), keeps: true},
	{name: "latency+loss on follower link", inject: slowLink(1), keeps: true},
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
