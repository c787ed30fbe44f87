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

// clusterCollector reports a node's raft state on each scrape.
type clusterCollector struct {
	read                                       func() ClusterSample
	role, term, commit, applied, last, changes *prometheus.Desc
	entries, commands, waits, waitTimeouts     *prometheus.Desc
	snapFails                                  *prometheus.Desc
}

// NewClusterCollector returns a collector reporting what read returns, at
// each scrape: latchd_raft_role{role} (1 for the current role), term,
// commit, applied and last log index, leader changes seen, and the
// leader's batching: entries and commands proposed, batch waits and those
// that timed out; and the snapshot writes that failed.
func NewClusterCollector(read func() ClusterSample) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("latchd_raft_"+name, help, labels, nil)
	}
	return &clusterCollector{read: read,
		role:         d("role", "1 for this node's current raft role.", "role"),
		term:         d("term", "Current raft term."),
		commit:       d("commit_index", "Index of the last committed log entry."),
		applied:      d("applied_index", "Index of the last log entry applied to the engine."),
		last:         d("last_log_index", "Index of the last entry in the local log."),
		changes:      d("leader_changes_total", "Leader changes this node observed."),
		entries:      d("proposed_entries_total", "Log entries of client commands this node proposed as leader (not its restamp and expiry entries)."),
		commands:     d("proposed_commands_total", "Client commands in the entries this node proposed as leader."),
		waits:        d("batch_waits_total", "Batch waits: the leader holding queued commands for the clients it just answered."),
		waitTimeouts: d("batch_wait_timeouts_total", "Batch waits that ended at their deadline."),
		snapFails:    d("snapshot_write_failures_total", "Snapshot writes that failed on this node (the log is not compacted behind them)."),
	}
}

// Describe implements prometheus.Collector.
func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.role, c.term, c.commit, c.applied, c.last, c.changes,
		c.entries, c.commands, c.waits, c.waitTimeouts, c.snapFails} {
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
	ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, float64(s.Term))
	ch <- prometheus.MustNewConstMetric(c.commit, prometheus.GaugeValue, float64(s.CommitIndex))
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, float64(s.AppliedIndex))
	ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue, float64(s.LastLogIndex))
	ch <- prometheus.MustNewConstMetric(c.changes, prometheus.CounterValue, float64(s.LeaderChanges))
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.CounterValue, float64(s.ProposedEntries))
	ch <- prometheus.MustNewConstMetric(c.commands, prometheus.CounterValue, float64(s.ProposedCommands))
	ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(s.BatchWaits))
	ch <- prometheus.MustNewConstMetric(c.waitTimeouts, prometheus.CounterValue, float64(s.BatchWaitTimeouts))
	ch <- prometheus.MustNewConstMetric(c.snapFails, prometheus.CounterValue, float64(s.SnapshotWriteFailures))
}
