package metrics

import "github.com/prometheus/client_golang/prometheus"

// ClusterSample is one reading of a cluster node's raft state.
type ClusterSample struct {
	Role          string // "leader", "follower", "candidate", "shutdown"
	Term          uint64
	CommitIndex   uint64
	AppliedIndex  uint64
	LastLogIndex  uint64
	LeaderChanges uint64
	// Batching on the leader (replica.Status).
	ProposedEntries, ProposedCommands, BatchWaits, BatchWaitTimeouts uint64
	// Snapshot writes that failed (replica.Status).
	SnapshotWriteFailures uint64
}

var roles = [...]string{"leader", "follower", "candidate", "shutdown"}

// raftFamilies are the unlabelled latchd_raft_ families, in scrape order.
var raftFamilies = [...]struct {
	name, help string
	kind       prometheus.ValueType
	value      func(*ClusterSample) uint64
}{
	{"term", "Current raft term.", prometheus.GaugeValue, func(s *ClusterSample) uint64 { return s.Term }},
	{"commit_index", "Index of the last committed log entry.", prometheus.GaugeValue, func(s *ClusterSample) uint64 { return s.CommitIndex }},
	{"applied_index", "Index of the last log entry applied to the engine.", prometheus.GaugeValue, func(s *ClusterSample) uint64 { return s.AppliedIndex }},
	{"last_log_index", "Index of the last entry in the local log.", prometheus.GaugeValue, func(s *ClusterSample) uint64 { return s.LastLogIndex }},
	{"leader_changes_total", "Leader changes this node observed.", prometheus.CounterValue, func(s *ClusterSample) uint64 { return s.LeaderChanges }},
	{"proposed_entries_total", "Log entries of client commands this node proposed as leader (not its restamp and expiry entries).", prometheus.CounterValue, func(s *ClusterSample) uint64 { return s.ProposedEntries }},
	{"proposed_commands_total", "Client commands in the entries this node proposed as leader.", prometheus.CounterValue, func(s *ClusterSample) uint64 { return s.ProposedCommands }},
	{"batch_waits_total", "Batch waits: the leader holding queued commands for the clients it just answered.", prometheus.CounterValue, func(s *ClusterSample) uint64 { return s.BatchWaits }},
	{"batch_wait_timeouts_total", "Batch waits that ended at their deadline.", prometheus.CounterValue, func(s *ClusterSample) uint64 { return s.BatchWaitTimeouts }},
	{"snapshot_write_failures_total", "Snapshot writes that failed on this node (the log is not compacted behind them).", prometheus.CounterValue, func(s *ClusterSample) uint64 { return s.SnapshotWriteFailures }},
}

// clusterCollector reports a node's raft state on each scrape.
type clusterCollector struct {
	read  func() ClusterSample
	role  *prometheus.Desc
	descs [len(raftFamilies)]*prometheus.Desc
}

// NewClusterCollector returns a collector reporting what read returns at
// each scrape: latchd_raft_role{role} (1 for the current role) and the
// raftFamilies.
func NewClusterCollector(read func() ClusterSample) prometheus.Collector {
	c := &clusterCollector{read: read,
		role: prometheus.NewDesc("latchd_raft_role", "1 for this node's current raft role.", []string{"role"}, nil)}
	for i, f := range raftFamilies {
		c.descs[i] = prometheus.NewDesc("latchd_raft_"+f.name, f.help, nil, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.role
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.read()
	for _, r := range roles {
		v := 0.0
		if r == s.Role {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.role, prometheus.GaugeValue, v, r)
	}
	for i, f := range raftFamilies {
		ch <- prometheus.MustNewConstMetric(c.descs[i], f.kind, float64(f.value(&s)))
	}
}
