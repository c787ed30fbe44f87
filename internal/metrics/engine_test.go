package metrics

import (
	"strings"
	"testing"

	"github.com/latchd/latchd/engine"
)

func TestAppendEngine(t *testing.T) {
	s := Sample{
		Counters:       engine.Counters{Grants: 7, Releases: 5, Renewals: 3, Timeouts: 2, Expiries: 1, Dropped: 4, Pruned: 6},
		Gauges:         engine.Gauges{Keys: 9, Held: 2, Waiting: 3, Sessions: 4},
		TCPConnections: 11,
		LastFence:      42,
	}
	out := string(AppendEngine(nil, &s))
	tests := []struct {
		name string
		line string
	}{
		{name: "tcp connections", line: "latchd_tcp_connections 11"},
		{name: "sessions", line: "latchd_http_sessions 4"},
		{name: "keys", line: "latchd_keys 9"},
		{name: "held", line: "latchd_held 2"},
		{name: "waiters", line: "latchd_waiters 3"},
		{name: "fence", line: "latchd_last_fence 42"},
		{name: "grants", line: "latchd_grants_total 7"},
		{name: "releases", line: "latchd_releases_total 5"},
		{name: "renewals", line: "latchd_renewals_total 3"},
		{name: "timeouts", line: "latchd_timeouts_total 2"},
		{name: "expiries", line: "latchd_expiries_total 1"},
		{name: "dropped", line: "latchd_dropped_total 4"},
		{name: "pruned", line: "latchd_pruned_total 6"},
		{name: "counter type", line: "# TYPE latchd_grants_total counter"},
		{name: "gauge type", line: "# TYPE latchd_held gauge"},
	}
	lines := strings.Split(out, "\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, l := range lines {
				if l == tt.line {
					return
				}
			}
			t.Fatalf("output lacks line %q:\n%s", tt.line, out)
		})
	}
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("output does not end in a newline")
	}
}
