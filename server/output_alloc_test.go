//go:build !race

package server

import "testing"

// TestSettleAllocatesNothing checks that the output accounting of a turn
// allocates nothing, whether the answers went to the socket or some wait
// unsent, and that the common case leaves the shared budget alone.
func TestSettleAllocatesNothing(t *testing.T) {
	r := newRig(t, nil)
	if n := testing.AllocsPerRun(200, func() { _ = r.s.settle(r.a, 64, 0) }); n != 0 {
		t.Errorf("settle, all sent: %v allocations per run; want 0", n)
	}
	if got := r.s.budget.Used(); got != 0 {
		t.Errorf("budget after sent output: %d; want 0", got)
	}
	unsent := 0
	if n := testing.AllocsPerRun(200, func() {
		unsent = (unsent + 100) % 1000
		_ = r.s.settle(r.a, 100, unsent)
	}); n != 0 {
		t.Errorf("settle, some unsent: %v allocations per run; want 0", n)
	}
	_ = r.s.settle(r.a, 0, 0)
	if got := r.s.budget.Used(); got != 0 {
		t.Errorf("budget after the output drained: %d; want 0", got)
	}
}
