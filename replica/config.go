package replica

import (
	"fmt"
	"time"

	"github.com/latchd/latchd/engine"
)

// AnswerRunner runs fn, which answers n proposers of the entries one
// apply pass applied, in their log order. It reports false when it will
// not run fn; fn then runs on the goroutine that applied them. Calls come
// from one goroutine at a time, in log order.
type AnswerRunner func(n int, fn func()) bool

// Peer is one voter of the cluster.
type Peer struct {
	ID         string // raft server ID, unique in the cluster
	RaftAddr   string // host:port of its raft transport
	ClientAddr string // host:port its clients use; named in error_not_leader
}

// Config sets up a Node. Build it from DefaultConfig.
type Config struct {
	// NodeID is this node's raft server ID.
	NodeID string
	// BindAddr is the raft transport's listen address (TCP; unused with
	// an in-memory transport). AdvertiseAddr, if set, is what peers dial.
	BindAddr      string
	AdvertiseAddr string
	// AuthToken, if set, is a secret every node shares (at least 16 bytes;
	// read it from a file, never a flag): the transport admits only peers
	// that prove they hold it (auth.go). It authenticates, it does not
	// encrypt. Empty: plain TCP, for a trusted network.
	AuthToken string
	// ClientAddr is where this node's clients connect; a new leader
	// writes it into the log so followers can redirect to it.
	ClientAddr string
	// HTTPAddr is this node's REST address, or empty; a new leader logs
	// it next to ClientAddr (NotLeaderError.HTTPAddr).
	HTTPAddr string
	// RaftDir holds the raft log, hard state and snapshots (see DiskStorage).
	RaftDir string
	// Bootstrap makes this node write the initial configuration, Peers
	// (which must include the node itself), when its storage is empty.
	// Bootstrapping every initial peer with the same Peers is safe.
	Bootstrap bool
	Peers     []Peer
	// Engine configures the replicated engine; every node must use the
	// same Shards (ReadState refuses another) and limits.
	Engine engine.Config

	// ElectionTimeout: a follower that hears no leader for 1-2 times it
	// calls an election; a leader heartbeats every fifth of it and steps
	// down when a quorum has not answered for as long (CheckQuorum).
	ElectionTimeout time.Duration
	// SnapshotThreshold is how many applied entries make a snapshot due
	// (Node.snapshotDue), TrailingLogs how many entries the log keeps
	// behind one for followers a little behind, SnapshotRetain how many
	// snapshot files stay on disk.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotRetain    int
	// BatchWait bounds the leader's wait for the proposers it just
	// answered, so their next commands share one entry (batchwait.go);
	// 0 proposes at once.
	BatchWait time.Duration
	// ExpireEvery is how often the leader checks for due deadlines.
	ExpireEvery time.Duration
	// ApplyTimeout bounds how long a proposal waits to enter the log when
	// its context has no deadline.
	ApplyTimeout time.Duration
	// RaftLogLevel is etcd raft's log level: "off", "error", "warn",
	// "info", "debug".
	RaftLogLevel string
	// FenceFloor: every leadership of this node starts by raising the
	// fence counter to max(wall clock ns, FenceFloor) through the log. Set
	// it from a single node's fence journal (--fence-state-file).
	FenceFloor uint64
	// LearnerPromoteLag: leading, this node promotes a learner whose log
	// ends within this many entries of the commit index (promote.go); 0
	// never does (AddVoter promotes by hand).
	LearnerPromoteLag uint64
}

// DefaultConfig returns production defaults: a follower calls an election
// 0.5-1 s after the leader's last heartbeat, so a new leader serves within
// about 2 s of the old one's death; a snapshot every 8192 entries.
func DefaultConfig() Config {
	return Config{
		Engine:            engine.DefaultConfig(),
		ElectionTimeout:   500 * time.Millisecond,
		SnapshotThreshold: 8192,
		TrailingLogs:      10240,
		SnapshotRetain:    2,
		BatchWait:         2 * time.Millisecond,
		ExpireEvery:       10 * time.Millisecond,
		ApplyTimeout:      5 * time.Second,
		RaftLogLevel:      "warn",
		LearnerPromoteLag: DefaultLearnerPromoteLag,
	}
}

// DefaultLearnerPromoteLag is Config.LearnerPromoteLag's default: well
// under a second of catching up at usual commit rates.
const DefaultLearnerPromoteLag = 1000

// Validate reports the first field out of range. Raft's own checks run
// again when the Node starts.
func (c Config) Validate() error {
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	if c.Engine.FenceLimit != 0 {
		// The log is the fence journal: a replicated engine must not
		// call a node-local FenceReserve.
		return fmt.Errorf("replica: engine fence limit must be 0, got %d", c.Engine.FenceLimit)
	}
	switch {
	case c.NodeID == "":
		return fmt.Errorf("replica: node ID is empty")
	case c.ElectionTimeout < 10*time.Millisecond:
		return fmt.Errorf("replica: election timeout %v below 10ms", c.ElectionTimeout)
	case c.SnapshotThreshold < 1:
		return fmt.Errorf("replica: snapshot threshold must be >= 1, got %d", c.SnapshotThreshold)
	case c.SnapshotRetain < 1:
		return fmt.Errorf("replica: snapshot retain must be >= 1, got %d", c.SnapshotRetain)
	case c.BatchWait < 0 || c.BatchWait > 100*time.Millisecond:
		return fmt.Errorf("replica: batch wait %v out of range 0..100ms", c.BatchWait)
	case c.ExpireEvery <= 0 || c.ApplyTimeout <= 0:
		return fmt.Errorf("replica: expire interval %v and apply timeout %v must be > 0", c.ExpireEvery, c.ApplyTimeout)
	}
	if c.AuthToken != "" && len(c.AuthToken) < authMinTokenLen {
		return fmt.Errorf("replica: raft auth token is %d bytes; it must be at least %d", len(c.AuthToken), authMinTokenLen)
	}
	if _, ok := raftLogLevels[c.RaftLogLevel]; !ok {
		return fmt.Errorf("replica: raft log level %q unknown", c.RaftLogLevel)
	}
	if c.Bootstrap {
		seen := make(map[string]bool)
		for _, p := range c.Peers {
			if p.ID == "" || p.RaftAddr == "" || seen[p.ID] {
				return fmt.Errorf("replica: peer %+v: empty or repeated ID or address", p)
			}
			seen[p.ID] = true
		}
		if !seen[c.NodeID] {
			return fmt.Errorf("replica: bootstrap peers must include node %q", c.NodeID)
		}
	}
	return nil
}
