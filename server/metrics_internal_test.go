package server

import (
	"fmt"
	"testing"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/internal/metrics"
)

func TestReasonFor(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want metrics.Reason
	}{
		{name: "line too long", err: codec.ErrLineTooLong, want: metrics.ReasonLineTooLong},
		{name: "unknown cmd", err: codec.ErrUnknownCmd, want: metrics.ReasonUnknownCmd},
		{name: "bad key", err: codec.ErrBadKey, want: metrics.ReasonBadKey},
		{name: "bad arg", err: codec.ErrBadArg, want: metrics.ReasonBadArg},
		{name: "bad int", err: codec.ErrBadInt, want: metrics.ReasonBadInt},
		{name: "negative", err: codec.ErrNegative, want: metrics.ReasonNegative},
		{name: "non positive", err: codec.ErrNonPositive, want: metrics.ReasonNonPositive},
		{name: "empty token", err: codec.ErrEmptyToken, want: metrics.ReasonEmptyToken},
		{name: "arg count", err: codec.ErrArgCount, want: metrics.ReasonArgCount},
		{name: "wrapped", err: fmt.Errorf("x: %w", codec.ErrBadKey), want: metrics.ReasonBadKey},
		{name: "not authed", err: errNotAuthed, want: metrics.ReasonAuth},
		{name: "bad auth", err: errBadAuth, want: metrics.ReasonAuth},
		{name: "parked overflow", err: errParkedOverflow, want: metrics.ReasonParkedOverflow},
		{name: "other", err: fmt.Errorf("something else"), want: metrics.ReasonOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reasonFor(tt.err); got != tt.want {
				t.Fatalf("reasonFor(%v) = %v; want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestParkedOverflowCounted drives process past MaxParked and checks the
// reason recorded.
func TestParkedOverflowCounted(t *testing.T) {
	reg := metrics.NewRegistry(nil)
	r := newRig(t, reg.TCP())
	r.run(t, r.a, []byte("l\nk0\n0\n"))
	buf := []byte("l\nk0\n30\n")
	junk := make([]byte, r.s.cfg.MaxParked+1)
	buf = append(buf, junk...)
	if used, _, closeNow := r.s.process(r.b, buf); !closeNow || used != len("l\nk0\n30\n") {
		t.Fatalf("process = %d, close %v; want the lock consumed and a close", used, closeNow)
	}
	if got := r.s.Violations(); got != 1 {
		t.Fatalf("Violations() = %d; want 1", got)
	}
	mfs, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "latchd_tcp_protocol_errors_total" {
			continue
		}
		for _, m := range mf.Metric {
			want := 0.0
			if m.Label[0].GetValue() == "parked_overflow" {
				want = 1
			}
			if got := m.GetCounter().GetValue(); got != want {
				t.Errorf("protocol errors{reason=%q} = %v; want %v", m.Label[0].GetValue(), got, want)
			}
		}
		return
	}
	t.Fatal("no latchd_tcp_protocol_errors_total family")
}
