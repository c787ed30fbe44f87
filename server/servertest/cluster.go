package servertest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/internal/testport"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/replica"
	"github.com/latchd/latchd/server"
)

// Cluster is an in-process latchd cluster on loopback: each member is a
// replica.Node on disk (real TCP transport, fsync on), a TCP server over
// it and, with ClusterOptions.HTTP, a REST server over it.
type Cluster struct {
	tb      testing.TB
	mu      sync.Mutex
	members []*Member
	edit    func(*replica.Config)
	sedit   func(*server.Config)
	http    HTTPStarter
}

// Member is one node of a Cluster.
type Member struct {
	ID       string
	Addr     string // client TCP address
	HTTPAddr string // REST address (replica.Config.HTTPAddr); "" without ClusterOptions.HTTP
	RaftAddr string
	Dir      string
	Node     *replica.Node  // nil while stopped
	TCP      *server.Server // nil while stopped

	stopHTTP func(context.Context) error // nil while stopped or without HTTP
}

// HTTPStarter starts member m's REST server, listening on m.HTTPAddr
// over m.Node (running), and returns what stops it. It is a function
// because this package cannot import httpfast (whose tests import this
// package).
type HTTPStarter func(tb testing.TB, m *Member) (stop func(context.Context) error)

// ClusterOptions adjust StartClusterOpts.
type ClusterOptions struct {
	// Edit, if not nil, adjusts every member's replica Config.
	Edit func(*replica.Config)
	// ServerEdit, if not nil, adjusts every member's TCP server Config.
	ServerEdit func(*server.Config)
	// HTTP, if not nil, gives every member a REST address and starts its
	// REST server with it, after the node and the TCP server.
	HTTP HTTPStarter
}

// ClusterConfig returns a replica Config with timings short enough for
// tests (an election within a second or so) and long enough that a stall
// of a loaded test binary running -race costs no leader its lease.
func ClusterConfig(id string) replica.Config {
	cfg := replica.DefaultConfig()
	cfg.NodeID = id
	cfg.ElectionTimeout = 500 * time.Millisecond
	cfg.ExpireEvery = 5 * time.Millisecond
	cfg.ApplyTimeout = 2 * time.Second
	cfg.RaftLogLevel = "off"
	cfg.Engine.Shards = 8
	return cfg
}

// StartCluster starts n members bootstrapped together and stops them when
// the test ends. edit, if not nil, adjusts every member's Config.
func StartCluster(tb testing.TB, n int, edit func(*replica.Config)) *Cluster {
	tb.Helper()
	return StartClusterOpts(tb, n, ClusterOptions{Edit: edit})
}

// StartClusterOpts starts n members bootstrapped together, as o says, and
// stops them when the test ends.
func StartClusterOpts(tb testing.TB, n int, o ClusterOptions) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb, edit: o.Edit, sedit: o.ServerEdit, http: o.HTTP}
	var peers []replica.Peer
	for i := range n {
		m := &Member{ID: fmt.Sprint("n", i+1), Addr: testport.Free(tb), RaftAddr: testport.Free(tb),
			Dir: filepath.Join(tb.TempDir(), "raft")}
		if c.http != nil {
			m.HTTPAddr = testport.Free(tb)
		}
		c.members = append(c.members, m)
		peers = append(peers, replica.Peer{ID: m.ID, RaftAddr: m.RaftAddr, ClientAddr: m.Addr})
	}
	for i := range c.members {
		c.start(i, peers)
	}
	tb.Cleanup(func() {
		for i := range c.members {
			c.Stop(i)
		}
	})
	return c
}

// Members returns the members, running or not.
func (c *Cluster) Members() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.members)
}

// Restart starts a stopped member again on its directory and addresses.
func (c *Cluster) Restart(i int) { c.start(i, nil) }

func (c *Cluster) start(i int, peers []replica.Peer) {
	c.tb.Helper()
	c.mu.Lock()
	m := c.members[i]
	c.mu.Unlock()
	cfg := ClusterConfig(m.ID)
	cfg.BindAddr = m.RaftAddr
	cfg.ClientAddr = m.Addr
	cfg.HTTPAddr = m.HTTPAddr
	cfg.RaftDir = m.Dir
	cfg.Bootstrap = peers != nil
	cfg.Peers = peers
	if c.edit != nil {
		c.edit(&cfg)
	}
	log := zap.NewNop()
	var (
		st  replica.Storage
		err error
	)
	// A restarted member's raft port may sit in TIME_WAIT for a moment.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err = replica.DiskStorage(cfg, log)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		c.tb.Fatalf("DiskStorage(%s): %v", m.ID, err)
	}
	node, err := replica.New(cfg, log, st)
	if err != nil {
		c.tb.Fatalf("replica.New(%s): %v", m.ID, err)
	}
	scfg := server.DefaultConfig()
	scfg.Addr = m.Addr
	scfg.EventLoops = 2
	if c.sedit != nil {
		c.sedit(&scfg)
	}
	srv, err := server.New(scfg, node, log)
	if err != nil {
		c.tb.Fatalf("server.New(%s): %v", m.ID, err)
	}
	if err := srv.Start(); err != nil {
		c.tb.Fatalf("server.Start(%s): %v", m.ID, err)
	}
	c.mu.Lock()
	m.Node, m.TCP = node, srv
	c.mu.Unlock()
	if c.http != nil {
		stop := c.http(c.tb, m)
		c.mu.Lock()
		m.stopHTTP = stop
		c.mu.Unlock()
	}
}

// Stop stops member i (its REST server, its TCP server, then its node), as
// a crash would look to the others. It is a no-op for a stopped member.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	m := c.members[i]
	node, srv, stopHTTP := m.Node, m.TCP, m.stopHTTP
	m.Node, m.TCP, m.stopHTTP = nil, nil, nil
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if stopHTTP != nil {
		if err := stopHTTP(ctx); err != nil {
			c.tb.Errorf("REST server Stop(%s): %v", m.ID, err)
		}
	}
	if srv != nil {
		if err := srv.Stop(ctx); err != nil {
			c.tb.Errorf("server.Stop(%s): %v", m.ID, err)
		}
	}
	if node != nil {
		if err := node.Shutdown(); err != nil {
			c.tb.Logf("Shutdown(%s): %v", m.ID, err)
		}
	}
}

// Crash stops member i as a kill -9 would look to its clients and to the
// others: its node first, so that nothing its servers do on the way down
// (a closed connection's Disconnect) reaches the log, then its REST and
// TCP servers, which drop every connection. A no-op for a stopped member.
func (c *Cluster) Crash(i int) {
	c.mu.Lock()
	node := c.members[i].Node
	c.mu.Unlock()
	if node != nil {
		if err := node.Shutdown(); err != nil {
			c.tb.Logf("Shutdown(%s): %v", c.members[i].ID, err)
		}
	}
	c.Stop(i)
}

// LeaderTimeout is how long tests should give Leader: generous for a
// loaded race-enabled run; Leader returns as soon as the leader is stable.
const LeaderTimeout = 30 * time.Second

// stableFor is how long a leader must keep every running member's
// agreement before Leader returns it: a few heartbeats
// past its election, the usual moment a leader elected in a stall loses
// its place.
const stableFor = 600 * time.Millisecond

// Leader waits up to timeout for a stable leader and returns its index: a
// running member ready for commands (it has restamped) that every running
// member names, with its client address (and REST address, if any), and
// has done so for a moment (stableFor). A test that sends its first
// command the moment one member reports leading races the end of the
// election: a leader elected during a stall may lose its lease right away,
// and a follower that has not yet applied the leader's restamp names no
// REST address.
func (c *Cluster) Leader(timeout time.Duration) int {
	c.tb.Helper()
	leader, since := -1, time.Time{}
	testutil.Eventually(c.tb, timeout, func() bool {
		i := c.agreedLeader()
		if i < 0 || i != leader {
			leader, since = i, time.Now()
			return false
		}
		return time.Since(since) >= stableFor
	}, "no stable leader elected")
	return leader
}

// agreedLeader returns the index of the running member that leads, is
// ready, and is named (ID and addresses) by every running member; -1 if
// there is none.
func (c *Cluster) agreedLeader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	leader := slices.IndexFunc(c.members, func(m *Member) bool { return m.Node != nil && m.Node.IsLeader() })
	if leader < 0 {
		return -1
	}
	lm := c.members[leader]
	for _, m := range c.members {
		if m.Node == nil {
			continue
		}
		l := m.Node.Leader()
		if l.LeaderID != lm.ID || l.ClientAddr != lm.Addr || l.HTTPAddr != lm.HTTPAddr {
			return -1
		}
	}
	if !lm.Node.IsLeader() {
		return -1
	}
	return leader
}
