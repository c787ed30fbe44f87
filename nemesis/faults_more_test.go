//go:build nemesis

package nemesis

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// The slow disk: writes to the node's loop device at slowIOPS a second
// and slowBPS bytes a second, so each fdatasync of its log waits for the
// throttle.
const (
	slowIOPS = 25
	slowBPS  = 1 << 20
)

// slowDisk throttles the writes of node (l+rel)%n to its data disk.
func slowDisk(rel int) func(c *cluster, tp *topo, l int) (func() error, int, error) {
	return func(c *cluster, tp *topo, l int) (func() error, int, error) {
		i := (l + rel) % len(c.nodes)
		heal, err := c.slow(i)
		return heal, i, err
	}
}

// slow throttles node i's data disk, and shows in the log what a synced
// write costs there, throttled and not.
func (c *cluster) slow(i int) (func() error, error) {
	n := c.nodes[i]
	if !n.alive() {
		return nil, fmt.Errorf("%s is not running", n.id)
	}
	cg, heal, err := c.topo.throttle(fmt.Sprint("io", n.idx+1), c.topo.loops[n.idx].dev, n.cmd.Process.Pid, slowIOPS, slowBPS)
	if err != nil {
		return nil, err
	}
	c.probeOnce.Do(func() {
		fast, err1 := syncProbe("", n.dir, 5)
		slow, err2 := syncProbe(cg, n.dir, 5)
		c.t.Logf("slow disk: 5 synced 4 KiB writes on a node's disk take %v throttled, %v not (%v)",
			slow.Round(time.Millisecond), fast.Round(time.Millisecond), errors.Join(err1, err2))
		if slow < 5*fast || slow < 100*time.Millisecond {
			c.note("slow disk: the throttle does not slow synced writes (%v throttled, %v not)", slow, fast)
		}
	})
	return heal, nil
}

// pausePartition cuts the leader off from its peers and pauses it. Heal
// continues it while it is still cut off (it wakes believing it leads, and
// its clients still reach it), and heals the partition a second later.
func pausePartition(c *cluster, tp *topo, l int) (func() error, int, error) {
	heal, _, err := partition(tp, l)
	if err != nil {
		return nil, l, err
	}
	n := c.nodes[l]
	n.signal(syscall.SIGSTOP)
	return func() error {
		n.signal(syscall.SIGCONT)
		time.Sleep(time.Second)
		return heal()
	}, l, nil
}

// slowDiskKill slows a follower's disk and kill -9s the leader: the new
// quorum must commit through the slow disk.
func slowDiskKill(c *cluster, tp *topo, l int) (func() error, int, error) {
	unslow, err := c.slow((l + 1) % len(c.nodes))
	if err != nil {
		return nil, l, err
	}
	n := c.nodes[l]
	n.kill()
	return func() error { c.start(n); return unslow() }, l, nil
}

// transfer hands leadership to the most up-to-date follower with
// latchctl leader transfer.
func transfer(c *cluster, tp *topo, l int) (func() error, int, error) {
	_, err := c.latchctl("leader", "transfer")
	return func() error { return nil }, l, err
}

// replace removes a follower from the cluster with latchctl member
// remove, stops it and wipes its disk, then adds a fresh node in its
// place (a new id on the same namespace and disk) as a learner, starts it,
// and promotes it to voter once it has caught up.
func replace(c *cluster, tp *topo, l int) (func() error, int, error) {
	f := (l + 1) % len(c.nodes)
	n := c.nodes[f]
	if _, err := c.latchctl("member", "remove", n.id); err != nil {
		return nil, f, err
	}
	n.kill()
	if err := wipe(n.dir); err != nil {
		return nil, f, err
	}
	n.gen++
	n.id = fmt.Sprintf("n%d%c", n.idx+1, 'a'+n.gen)
	if _, err := c.latchctl("member", "add", n.id, n.raftAddr(), "--learner"); err != nil {
		return nil, f, err
	}
	n.args = nodeArgs(n, c.bin)
	c.start(n)
	if err := c.caughtUp(n, c.nodes[l], 30*time.Second); err != nil {
		return nil, f, err
	}
	_, err := c.latchctl("member", "promote", n.id)
	return func() error { return nil }, f, err
}

// wipe empties dir, a filesystem's root, leaving lost+found.
func wipe(dir string) error {
	es, err := os.ReadDir(dir)
	for _, e := range es {
		if e.Name() != "lost+found" {
			err = errors.Join(err, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	return err
}

// adminStatus is the part of GET /v1/admin/cluster the nemesis reads.
type adminStatus struct {
	Role         string `json:"role"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
}

func (c *cluster) status(n *node) (adminStatus, error) {
	var st adminStatus
	code, b, err := c.get(n, "/v1/admin/cluster", true)
	if err == nil && code != 200 {
		err = fmt.Errorf("GET /v1/admin/cluster on %s: %d %s", n.id, code, b)
	}
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	return st, err
}

// caughtUp waits until n has applied what leader had committed when the
// wait began.
func (c *cluster) caughtUp(n, leader *node, within time.Duration) error {
	ls, err := c.status(leader)
	if err != nil {
		return err
	}
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		if st, err := c.status(n); err == nil && st.AppliedIndex >= ls.CommitIndex {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not apply the leader's commit index %d within %v", n.id, ls.CommitIndex, within)
}
