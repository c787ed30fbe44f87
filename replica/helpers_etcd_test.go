//go:build !hashicorpraft

package replica

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.uber.org/zap"
)

// cluster is an in-process cluster of etcd-raft nodes on disk (temporary
// directories) over loopback TCP.
type cluster struct {
	t     testing.TB
	nodes []*Node // nil once shut down
	addrs []string
	edit  func(*Config)
}

// newCluster starts n nodes, all bootstrapped with the same peers. The
// peers carry no client address: followers learn the leader's from its
// Restamp entry.
func newCluster(t testing.TB, n int, edit func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, edit: edit}
	var peers []Peer
	for i := range n {
		c.addrs = append(c.addrs, freeAddr(t))
		peers = append(peers, Peer{ID: fmt.Sprint("n", i), RaftAddr: c.addrs[i]})
	}
	for i := range n {
		cfg := testConfig(fmt.Sprint("n", i))
		cfg.Bootstrap = true
		cfg.Peers = peers
		c.nodes = append(c.nodes, c.startNode(t, cfg, i))
	}
	t.Cleanup(c.shutdown)
	return c
}

func (c *cluster) startNode(t testing.TB, cfg Config, i int) *Node {
	t.Helper()
	cfg.BindAddr = c.addrs[i]
	cfg.RaftDir = filepath.Join(t.TempDir(), cfg.NodeID)
	if c.edit != nil {
		c.edit(&cfg)
	}
	st, err := DiskStorage(cfg, zap.NewNop())
	if err != nil {
		t.Fatalf("DiskStorage(%s): %v", cfg.NodeID, err)
	}
	nd, err := New(cfg, zap.NewNop(), st)
	if err != nil {
		_ = st.Close()
		t.Fatalf("New(%s): %v", cfg.NodeID, err)
	}
	return nd
}

// connectAll heals every partition.
func (c *cluster) connectAll() {
	for _, n := range c.nodes {
		if n != nil {
			n.tr.cut.Store(nil)
		}
	}
}

// isolate cuts node i off from every other node.
func (c *cluster) isolate(i int) {
	self := c.nodes[i].id
	all := func(uint64) bool { return true }
	c.nodes[i].tr.cut.Store(&all)
	for j, n := range c.nodes {
		if j != i && n != nil {
			cut := func(p uint64) bool { return p == self }
			n.tr.cut.Store(&cut)
		}
	}
}

// raftAddr is node i's raft address.
func (c *cluster) raftAddr(i int) string { return c.addrs[i] }

// snapshotNow has n take a snapshot and compact its log.
func snapshotNow(n *Node) error {
	done := make(chan struct{})
	n.forceSnap.Store(&done)
	n.applyQ.push(nil) // a marker: the apply thread snapshots when it reaches it
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("no snapshot")
	}
}

// raftLeads reports raft's own view: n is the leader.
func raftLeads(n *Node) bool { return raft.StateType(n.role.Load()) == raft.StateLeader }

// addNode starts a node with empty storage and has the leader add it as a
// voter.
func (c *cluster) addNode(t *testing.T) *Node {
	t.Helper()
	nd, addr := c.startEmpty(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.leader(t).AddVoter(ctx, nd.ID(), addr); err != nil {
		t.Fatalf("AddVoter(%s): %v", nd.ID(), err)
	}
	return nd
}

// startEmpty starts a node with empty storage, not yet a member, and
// returns it with its raft address.
func (c *cluster) startEmpty(t *testing.T) (*Node, string) {
	t.Helper()
	i := len(c.nodes)
	c.addrs = append(c.addrs, freeAddr(t))
	nd := c.startNode(t, testConfig(fmt.Sprint("n", i)), i)
	c.nodes = append(c.nodes, nd)
	return nd, c.addrs[i]
}

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
