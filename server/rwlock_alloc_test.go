//go:build !race

package server

import (
	"testing"

	"github.com/latchd/latchd/internal/metrics"
)

// TestProcessRWAllocatesNothing checks that read holds of one key and
// their releases allocate nothing in a connection's turn.
func TestProcessRWAllocatesNothing(t *testing.T) {
	for _, withMetrics := range []bool{false, true} {
		var m *metrics.TCP
		if withMetrics {
			m = metrics.NewRegistry(nil).TCP()
		}
		r := newRig(t, m)
		if n := testing.AllocsPerRun(200, func() { r.rwShared(t) }); n != 0 {
			t.Errorf("metrics %v: read holds allocate %v times per run; want 0", withMetrics, n)
		}
	}
}
