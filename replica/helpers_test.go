//go:build hashicorpraft

package replica

import (
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
