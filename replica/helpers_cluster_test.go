package replica

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.uber.org/zap"
)

// cluster is an in-process cluster of nodes on disk (temporary
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
