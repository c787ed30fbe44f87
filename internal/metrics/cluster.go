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
}

var roles = [...]string{"leader", "follower", "candidate", "shutdown"}

// clusterCollector reports a node's raft state on each scrape.
type clusterCollector struct {
	read                                       func() ClusterSample
	role, term, commit, applied, last, changes *prometheus.Desc
}

// NewClusterCollector returns a collector reporting what read returns, at
// each scrape: latchd_raft_role{role} (1 for the current role), term,
// commit, applied and last log index, and leader changes seen.
func NewClusterCollector(read func() ClusterSample) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("latchd_raft_"+name, help, labels, nil)
	}
	return &clusterCollector{read: read,
		role:    d("role", "1 for this node's current raft role.", "role"),
		term:    d("term", "Current raft term."),
		commit:  d("commit_index", "Index of the last committed log entry."),
		applied: d("applied_index", "Index of the last log entry applied to the engine."),
		last:    d("last_log_index", "Index of the last entry in the local log."),
		changes: d("leader_changes_total", "Leader changes this node observed."),
	}
}

// Describe implements prometheus.Collector.
func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.role, c.term, c.commit, c.applied, c.last, c.changes} {
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
}
