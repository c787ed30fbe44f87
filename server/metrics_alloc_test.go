//go:build !race

package server

import (
	"testing"

	"github.com/latchd/latchd/internal/metrics"
)

// TestProcessAllocatesNothing checks that a turn of a connection, with
// metrics on or off, allocates nothing: a pipelined batch of locks and
// releases, and a parked lock handed off by a release.
func TestProcessAllocatesNothing(t *testing.T) {
	for _, withMetrics := range []bool{false, true} {
		var m *metrics.TCP
		if withMetrics {
			m = metrics.NewRegistry(nil).TCP()
		}
		r := newRig(t, m)
		if n := testing.AllocsPerRun(200, func() { r.pipelined(t) }); n != 0 {
			t.Errorf("metrics %v: pipelined batch allocates %v times per run; want 0", withMetrics, n)
		}
		if n := testing.AllocsPerRun(200, func() { r.parked(t) }); n != 0 {
			t.Errorf("metrics %v: parked hand-off allocates %v times per run; want 0", withMetrics, n)
		}
	}
}
