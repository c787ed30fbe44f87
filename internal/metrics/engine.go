package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latchd/engine"
)

// sample is what one scrape reads from the engine and the TCP server.
type sample struct {
	counters       engine.Counters
	gauges         engine.Gauges
	tcpConnections int64
	lastFence      uint64
	refusedKeys    uint64
	refusedWaiters uint64
	refusedOwner   uint64
}

type family struct {
	name, help string
	kind       prometheus.ValueType
	value      func(*sample) float64
}

var families = [...]family{
	{"latchd_tcp_connections", "Open TCP connections.", prometheus.GaugeValue, func(s *sample) float64 { return float64(s.tcpConnections) }},
	{"latchd_http_sessions", "Open REST sessions.", prometheus.GaugeValue, func(s *sample) float64 { return float64(s.gauges.Sessions) }},
	{"latchd_keys", "Keys in memory, idle ones included.", prometheus.GaugeValue, func(s *sample) float64 { return float64(s.gauges.Keys) }},
	{"latchd_held", "Slots held.", prometheus.GaugeValue, func(s *sample) float64 { return float64(s.gauges.Held) }},
	{"latchd_waiters", "Requests waiting in queues.", prometheus.GaugeValue, func(s *sample) float64 { return float64(s.gauges.Waiting) }},
	{"latchd_last_fence", "Last fence number issued (a float64: rounded above 2^53; see latchd_last_fence_high32 and _low32).", prometheus.GaugeValue, func(s *sample) float64 { return float64(s.lastFence) }},
	{"latchd_last_fence_high32", "Upper 32 bits of the last fence number issued: fence = high32 * 2^32 + low32, exactly.", prometheus.GaugeValue, func(s *sample) float64 { return float64(s.lastFence >> 32) }},
	{"latchd_last_fence_low32", "Lower 32 bits of the last fence number issued.", prometheus.GaugeValue, func(s *sample) float64 { return float64(s.lastFence & 0xffffffff) }},
	{"latchd_grants_total", "Slots granted, at once or to a waiter.", prometheus.CounterValue, func(s *sample) float64 { return float64(s.counters.Grants) }},
	{"latchd_releases_total", "Slots given back with a token.", prometheus.CounterValue, func(s *sample) float64 { return float64(s.counters.Releases) }},
	{"latchd_renewals_total", "Leases renewed.", prometheus.CounterValue, func(s *sample) float64 { return float64(s.counters.Renewals) }},
	{"latchd_timeouts_total", "Waits that ended without a grant, try-locks included.", prometheus.CounterValue, func(s *sample) float64 { return float64(s.counters.Timeouts) }},
	{"latchd_expiries_total", "Leases that ran out.", prometheus.CounterValue, func(s *sample) float64 { return float64(s.counters.Expiries) }},
	{"latchd_dropped_total", "Slots released because their owner went away.", prometheus.CounterValue, func(s *sample) float64 { return float64(s.counters.Dropped) }},
	{"latchd_pruned_total", "Idle keys removed.", prometheus.CounterValue, func(s *sample) float64 { return float64(s.counters.Pruned) }},
	{"latchd_lock_delays_total", "Slots held back by a lock-delay after an involuntary loss (lease expiry, disconnect).", prometheus.CounterValue, func(s *sample) float64 { return float64(s.counters.Delays) }},
	{"latchd_delayed_slots", "Slots a lock-delay holds back now.", prometheus.GaugeValue, func(s *sample) float64 { return float64(s.gauges.Delayed) }},
}

// engineCollector is a prometheus.Collector that reads the engine once per
// scrape and reports its counters and gauges as const metrics, with the
// TCP connection count the server keeps in TCP.
type engineCollector struct {
	eng     func() *engine.Engine
	tcp     *TCP
	descs   [len(families)]*prometheus.Desc
	refused *prometheus.Desc // latchd_refused_total{limit}
}

func newEngineCollector(eng func() *engine.Engine, tcp *TCP) *engineCollector {
	c := &engineCollector{eng: eng, tcp: tcp}
	for i := range families {
		c.descs[i] = prometheus.NewDesc(families[i].name, families[i].help, nil, nil)
	}
	c.refused = prometheus.NewDesc("latchd_refused_total", "Requests refused at a cap: limit=\"max_locks\" "+
		"(--max-locks, no idle key to evict) or limit=\"max_waiters\" (--max-waiters).", []string{"limit"}, nil)
	return c
}

// Describe implements prometheus.Collector.
func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.refused
}

// Collect implements prometheus.Collector: one engine.Metrics call (each
// shard locked briefly in turn, no key copied) and one LastFence.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	var s sample
	if e := c.eng(); e != nil {
		s.counters, s.gauges = e.Metrics()
		s.lastFence = e.LastFence()
		s.refusedKeys, s.refusedWaiters = e.Refusals()
		s.refusedOwner = e.OwnerRefusals()
	}
	s.tcpConnections = c.tcp.conns.Load()
	for i := range families {
		f := &families[i]
		ch <- prometheus.MustNewConstMetric(c.descs[i], f.kind, f.value(&s))
	}
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.refusedKeys), "max_locks")
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.refusedWaiters), "max_waiters")
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.refusedOwner), "max_keys_per_owner")
}
