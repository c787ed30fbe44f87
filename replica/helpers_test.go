package replica

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// testConfig is a node Config with timings short enough that an in-memory
// election takes well under a second, even under -race on a busy machine.
func testConfig(id string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.ClientAddr = "client-" + id
	cfg.HTTPAddr = "http-" + id
	cfg.ElectionTimeout = 100 * time.Millisecond
	cfg.SnapshotThreshold = 1 << 20
	cfg.ExpireEvery = 5 * time.Millisecond
	cfg.ApplyTimeout = 2 * time.Second
	cfg.RaftLogLevel = "off"
	cfg.Engine.Shards = 8
	cfg.LearnerPromoteLag = 0 // tests that want learners promoted on their own set it
	return cfg
}

// poll calls cond until it reports true, failing the test after d. A
// ticker paces it: no bare sleeps.
func poll(t *testing.T, d time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			for _, f := range detail {
				msg += "; " + f()
			}
			t.Fatalf("no %s after %v%s", what, d, msg)
		}
		<-tick.C
	}
}

// chanSink is a Sink that hands the Outcome to a channel.
type chanSink chan engine.Outcome

func newChanSink() chanSink { return make(chanSink, 1) }

// Deliver implements engine.Sink; a second delivery would block the FSM,
// so it panics instead.
func (s chanSink) Deliver(o engine.Outcome) {
	select {
	case s <- o:
	default:
		panic("chanSink delivered twice")
	}
}

func (s chanSink) wait(t *testing.T, d time.Duration) engine.Outcome {
	t.Helper()
	select {
	case o := <-s:
		return o
	case <-time.After(d):
		t.Fatalf("sink heard nothing in %v", d)
	}
	return engine.Outcome{}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lockHolder returns the owner holding the lock key in n's engine at now,
// and false if nobody holds it.
func lockHolder(n *Node, key string, now int64) (engine.LockStat, bool) {
	for _, l := range n.FSM().Engine().Snapshot(now).Locks {
		if l.Key == key {
			return l, true
		}
	}
	return engine.LockStat{}, false
}

// The in-process cluster (helpers_cluster_test.go) keeps its nodes in
// c.nodes, nil once shut down.

func (c *cluster) shutdown() {
	for i, n := range c.nodes {
		if n != nil {
			if err := n.Shutdown(); err != nil {
				c.t.Errorf("shutdown %s: %v", n.ID(), err)
			}
			c.nodes[i] = nil
		}
	}
}

// kill shuts node i down.
func (c *cluster) kill(t *testing.T, i int) {
	t.Helper()
	if err := c.nodes[i].Shutdown(); err != nil {
		t.Fatalf("shutdown %s: %v", c.nodes[i].ID(), err)
	}
	c.nodes[i] = nil
}

func (c *cluster) index(n *Node) int {
	for i, m := range c.nodes {
		if m == n {
			return i
		}
	}
	return -1
}

func (c *cluster) live() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// findLeader returns the one live node that is leader and ready, or nil.
func (c *cluster) findLeader(among []*Node) *Node {
	var l *Node
	for _, n := range among {
		if n.IsLeader() {
			if l != nil {
				return nil // two think they lead: one is stale; wait
			}
			l = n
		}
	}
	return l
}

// leader waits for a ready leader among the live nodes.
func (c *cluster) leader(t *testing.T) *Node {
	t.Helper()
	return c.leaderAmong(t, c.live())
}

func (c *cluster) leaderAmong(t *testing.T, among []*Node) *Node {
	t.Helper()
	var l *Node
	poll(t, 5*time.Second, "a ready leader", func() bool {
		l = c.findLeader(among)
		return l != nil
	})
	return l
}

// waitSame waits until the nodes have applied the same log index and
// checks they then write the same state bytes.
func waitSame(t *testing.T, nodes ...*Node) []byte {
	t.Helper()
	var state []byte
	var last string
	poll(t, 5*time.Second, "nodes at one applied index", func() bool {
		var idx []uint64
		var states [][]byte
		for _, n := range nodes {
			var buf bytes.Buffer
			i, err := n.WriteState(&buf)
			if err != nil {
				t.Fatalf("%s: WriteState: %v", n.ID(), err)
			}
			idx = append(idx, i)
			states = append(states, buf.Bytes())
		}
		last = fmt.Sprint(idx)
		for i := range nodes {
			if idx[i] != idx[0] {
				return false
			}
		}
		for i := range nodes {
			if !bytes.Equal(states[i], states[0]) {
				t.Fatalf("%s and %s at index %d hold different states (%d and %d bytes)",
					nodes[0].ID(), nodes[i].ID(), idx[0], len(states[0]), len(states[i]))
			}
		}
		state = states[0]
		return true
	}, func() string { return "applied indexes " + last })
	return state
}
