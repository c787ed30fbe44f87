//go:build !race

package metrics

import (
	"testing"

	"github.com/latchd/latchd/codec"
)

// TestRecordingAllocatesNothing guards the TCP hot path: recording a
// request and its latency is an array index and atomic adds.
func TestRecordingAllocatesNothing(t *testing.T) {
	m := NewRegistry(nil).TCP()
	n := testing.AllocsPerRun(1000, func() {
		m.Request(codec.CmdLock)
		m.Answered(codec.CmdLock, 1500)
		m.Answered(codec.CmdSemWait, 3e9)
		m.ProtocolError(ReasonBadKey)
	})
	if n != 0 {
		t.Fatalf("recording allocates %v times per run; want 0", n)
	}
}

// BenchmarkRecord measures what the TCP server adds per request: one
// count and one latency observation.
func BenchmarkRecord(b *testing.B) {
	m := NewRegistry(nil).TCP()
	b.ReportAllocs()
	for b.Loop() {
		m.Request(codec.CmdLock)
		m.Answered(codec.CmdLock, 1500)
	}
}
