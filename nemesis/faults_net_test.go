//go:build nemesis

package nemesis

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// shaping is the qdisc that delays and drops on a shaped link. netem
// (delay with jitter, random loss) when the kernel has it; else tbf, a
// token bucket: the link carries shapeRate, and what exceeds it waits in
// a queue of up to shapeLatency, the rest is dropped. Under the nemesis's
// load that is a slow link with queueing delay and tail drops, not random
// loss on an idle link.
var (
	netemArgs = []string{"netem", "delay", "40ms", "10ms", "loss", "2%"}
	tbfArgs   = []string{"tbf", "rate", "1mbit", "burst", "8kb", "latency", "60ms"}
)

// qdisc returns the qdisc arguments to use: netem if this kernel takes
// it (tried on the bridge), else tbf.
func (tp *topo) qdisc() []string {
	tp.qdiscOnce.Do(func() {
		tp.shape = tbfArgs
		if run(append([]string{"tc", "qdisc", "add", "dev", tp.bridge, "root"}, netemArgs...)...) == nil {
			tp.shape = netemArgs
			_ = run("tc", "qdisc", "del", "dev", tp.bridge, "root")
		}
	})
	return tp.shape
}

// shapeLink delays and drops node i's traffic both ways: on the bridge
// side of its veth (what it receives) and inside its namespace (what it
// sends).
func shapeLink(tp *topo, i int) (func() error, error) {
	q := tp.qdisc()
	ns, peer := tp.nodeNS[i], tp.nodeNS[i]+"p"
	if err := run(append([]string{"tc", "qdisc", "add", "dev", tp.hostIf[i], "root"}, q...)...); err != nil {
		return nil, err
	}
	heal := func() error {
		return errors.Join(run("tc", "qdisc", "del", "dev", tp.hostIf[i], "root"),
			run("tc", "-n", ns, "qdisc", "del", "dev", peer, "root"))
	}
	if err := run(append([]string{"tc", "-n", ns, "qdisc", "add", "dev", peer, "root"}, q...)...); err != nil {
		_ = run("tc", "qdisc", "del", "dev", tp.hostIf[i], "root")
		return nil, err
	}
	return heal, nil
}

// slowLink shapes the link of the node rel places after the leader. The
// first time, it logs what a TCP connect to the node (a round trip) takes
// before and after.
func slowLink(rel int) func(c *cluster, tp *topo, l int) (func() error, int, error) {
	return func(c *cluster, tp *topo, l int) (func() error, int, error) {
		i := (l + rel) % len(c.nodes)
		first := false
		c.shapeOnce.Do(func() { first = true })
		var before string
		if first {
			before = c.connectTimes(c.nodes[i])
		}
		heal, err := shapeLink(tp, i)
		if first && err == nil {
			time.Sleep(500 * time.Millisecond) // the queue fills
			c.t.Logf("shaped link (%s): connects to the node take %s; unshaped %s", strings.Join(tp.qdisc(), " "), c.connectTimes(c.nodes[i]), before)
		}
		return heal, i, err
	}
}

// connectTimes dials n 10 times from the clients' namespace and reports
// the median and worst time, and how many failed.
func (c *cluster) connectTimes(n *node) string {
	var ts []time.Duration
	failed := 0
	for range 10 {
		t0 := time.Now()
		conn, err := c.dial.Dial(n.addr())
		if err != nil {
			failed++
			continue
		}
		ts = append(ts, time.Since(t0))
		_ = conn.Close()
	}
	if len(ts) == 0 {
		return fmt.Sprintf("(all %d failed)", failed)
	}
	slices.Sort(ts)
	return fmt.Sprintf("median %v, max %v, %d of 10 failed", ts[len(ts)/2].Round(time.Microsecond), ts[len(ts)-1].Round(time.Microsecond), failed)
}

// bridgePartition cuts the leader and one follower apart both ways; the
// third node still reaches both, and clients reach every node.
func bridgePartition(c *cluster, tp *topo, l int) (func() error, int, error) {
	x := (l + 1) % len(c.nodes)
	heal, err := cut(tp, [][2]int{{l, x}, {x, l}})
	return heal, x, err
}

// flapEvery is how long a flapping partition stays in place, and then
// away, in turn.
const flapEvery = 300 * time.Millisecond

// flap partitions the leader (as it was at the start) from its peers and
// heals it every flapEvery until heal, which leaves it healed.
func flap(c *cluster, tp *topo, l int) (func() error, int, error) {
	stop, done := make(chan struct{}), make(chan error, 1)
	var mu sync.Mutex
	var errs []error
	go func() {
		defer close(done)
		for {
			heal, _, err := partition(tp, l)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			select {
			case <-stop:
				done <- heal()
				return
			case <-time.After(flapEvery):
			}
			if err := heal(); err != nil {
				done <- err
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(flapEvery):
			}
		}
	}()
	return func() error {
		close(stop)
		err := <-done
		mu.Lock()
		defer mu.Unlock()
		return errors.Join(append(errs, err)...)
	}, l, nil
}
