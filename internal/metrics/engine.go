package metrics

import (
	"strconv"

	"github.com/latchd/latchd/engine"
)

// Sample is what one scrape reports about the engine and its listeners.
type Sample struct {
	Counters       engine.Counters
	Gauges         engine.Gauges
	TCPConnections int
	LastFence      uint64
}

type family struct {
	name, kind, help string
	value            func(*Sample) uint64
}

var families = [...]family{
	{"latchd_tcp_connections", "gauge", "Open TCP connections.", func(s *Sample) uint64 { return uint64(s.TCPConnections) }},
	{"latchd_http_sessions", "gauge", "Open REST sessions.", func(s *Sample) uint64 { return uint64(s.Gauges.Sessions) }},
	{"latchd_keys", "gauge", "Keys in memory, idle ones included.", func(s *Sample) uint64 { return uint64(s.Gauges.Keys) }},
	{"latchd_held", "gauge", "Slots held.", func(s *Sample) uint64 { return uint64(s.Gauges.Held) }},
	{"latchd_waiters", "gauge", "Requests waiting in queues.", func(s *Sample) uint64 { return uint64(s.Gauges.Waiting) }},
	{"latchd_last_fence", "gauge", "Last fence number issued.", func(s *Sample) uint64 { return s.LastFence }},
	{"latchd_grants_total", "counter", "Slots granted, at once or to a waiter.", func(s *Sample) uint64 { return s.Counters.Grants }},
	{"latchd_releases_total", "counter", "Slots given back with a token.", func(s *Sample) uint64 { return s.Counters.Releases }},
	{"latchd_renewals_total", "counter", "Leases renewed.", func(s *Sample) uint64 { return s.Counters.Renewals }},
	{"latchd_timeouts_total", "counter", "Waits that ended without a grant, try-locks included.", func(s *Sample) uint64 { return s.Counters.Timeouts }},
	{"latchd_expiries_total", "counter", "Leases that ran out.", func(s *Sample) uint64 { return s.Counters.Expiries }},
	{"latchd_dropped_total", "counter", "Slots released because their owner went away.", func(s *Sample) uint64 { return s.Counters.Dropped }},
	{"latchd_pruned_total", "counter", "Idle keys removed.", func(s *Sample) uint64 { return s.Counters.Pruned }},
}

// AppendEngine appends s in the Prometheus text format, with HELP and
// TYPE lines, to dst.
func AppendEngine(dst []byte, s *Sample) []byte {
	for i := range families {
		f := &families[i]
		dst = append(dst, "# HELP "...)
		dst = append(dst, f.name...)
		dst = append(dst, ' ')
		dst = append(dst, f.help...)
		dst = append(dst, "\n# TYPE "...)
		dst = append(dst, f.name...)
		dst = append(dst, ' ')
		dst = append(dst, f.kind...)
		dst = append(dst, '\n')
		dst = append(dst, f.name...)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, f.value(s), 10)
		dst = append(dst, '\n')
	}
	return dst
}
