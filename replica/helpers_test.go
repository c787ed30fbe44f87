//go:build hashicorpraft

package replica

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"
)

// cluster is an in-process cluster over raft's in-memory transport.
type cluster struct {
	t     testing.TB
	nodes []*Node // nil once shut down
	trans []*raft.InmemTransport
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
		addr, tr := raft.NewInmemTransport("")
		c.trans = append(c.trans, tr)
		peers = append(peers, Peer{ID: fmt.Sprint("n", i), RaftAddr: string(addr)})
	}
	c.connectAll()
	for i := range n {
		cfg := testConfig(fmt.Sprint("n", i))
		cfg.Bootstrap = true
		cfg.Peers = peers
		if edit != nil {
			edit(&cfg)
		}
		nd, err := New(cfg, zap.NewNop(), InmemStorage(c.trans[i]))
		if err != nil {
			t.Fatalf("New(%s): %v", cfg.NodeID, err)
		}
		c.nodes = append(c.nodes, nd)
	}
	t.Cleanup(c.shutdown)
	return c
}

func (c *cluster) connectAll() {
	for i, a := range c.trans {
		for j, b := range c.trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
}

// addNode starts a node with empty storage, connected to every other, and
// has the leader add it as a voter.
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

// startEmpty starts a node with empty storage, connected to every other,
// not yet a member, and returns it with its raft address.
func (c *cluster) startEmpty(t *testing.T) (*Node, string) {
	t.Helper()
	addr, tr := raft.NewInmemTransport("")
	c.trans = append(c.trans, tr)
	c.connectAll()
	cfg := testConfig(fmt.Sprint("n", len(c.nodes)))
	if c.edit != nil {
		c.edit(&cfg)
	}
	nd, err := New(cfg, zap.NewNop(), InmemStorage(tr))
	if err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, nd)
	return nd, string(addr)
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

// isolate cuts node i off from every other node.
func (c *cluster) isolate(i int) {
	for j := range c.trans {
		if j != i {
			c.trans[j].Disconnect(c.trans[i].LocalAddr())
		}
	}
	c.trans[i].DisconnectAll()
}

// raftAddr is node i's raft address.
func (c *cluster) raftAddr(i int) string { return string(c.trans[i].LocalAddr()) }

// snapshotNow has n take a snapshot (and compact its log).
func snapshotNow(n *Node) error { return n.Raft().Snapshot().Error() }

// raftLeads reports raft's own view: n is the leader.
func raftLeads(n *Node) bool { return n.raft.State() == raft.Leader }
