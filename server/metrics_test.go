package server_test

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// series finds one series of a gathered family by its labels; nil if
// there is none.
func series(t *testing.T, reg *metrics.Registry, name string, labels ...string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.Label {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// counter returns a counter's or gauge's value, failing if it is missing.
func counter(t *testing.T, reg *metrics.Registry, name string, labels ...string) float64 {
	t.Helper()
	m := series(t, reg, name, labels...)
	if m == nil {
		t.Fatalf("no series %s%v", name, labels)
	}
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

func histogram(t *testing.T, reg *metrics.Registry, cmd string) *dto.Histogram {
	t.Helper()
	m := series(t, reg, "latchd_tcp_request_duration_seconds", "cmd", cmd)
	if m == nil || m.Histogram == nil {
		t.Fatalf("no latency histogram for cmd %q", cmd)
	}
	return m.GetHistogram()
}

func TestMetricsOverTCP(t *testing.T) {
	reg := metrics.NewRegistry(nil)
	s := servertest.StartServerWith(t, []server.Option{server.WithMetrics(reg.TCP())})

	holder := dial(t, s.Addr)
	tok := grant(t, holder.do("l", "k", "0"), "ok")
	if got := holder.do("r", "k", tok); got != "ok" {
		t.Fatalf("release: %q", got)
	}
	// Pipelined: both answered in one batch.
	holder.send("sl\nsem\n0 2\nsl\nsem\n0 2\n")
	t1, t2 := grant(t, holder.line(), "ok"), grant(t, holder.line(), "ok")
	holder.send("sr\nsem\n" + t1 + "\nsr\nsem\n" + t2 + "\n")
	if a, b := holder.line(), holder.line(); a != "ok" || b != "ok" {
		t.Fatalf("semaphore releases: %q, %q", a, b)
	}

	// A parked lock: its latency runs until the grant is taken.
	tok = grant(t, holder.do("l", "p", "0"), "ok")
	waiter := dial(t, s.Addr)
	waiter.req("l", "p", "30")
	testutil.Eventually(t, 5*time.Second, func() bool {
		l := s.Engine.Snapshot(0).Locks
		return len(l) == 1 && l[0].Waiters == 1
	}, "waiter queued")
	const held = 60 * time.Millisecond
	time.Sleep(held) // not a wait for a condition: the parked request's latency
	if got := holder.do("r", "p", tok); got != "ok" {
		t.Fatalf("release p: %q", got)
	}
	grant(t, waiter.line(), "ok")
	if got := counter(t, reg, "latchd_tcp_connections"); got != 2 {
		t.Errorf("latchd_tcp_connections = %v; want 2", got)
	}

	// Bad input closes the connection and counts its reason.
	for _, in := range []string{"l\nk\nabc\n", "x\nk\n1\n", "l\n\n1\n"} {
		bad := dial(t, s.Addr)
		bad.send(in)
		if got := bad.line(); got != "error" {
			t.Fatalf("%q: got %q; want error", in, got)
		}
		bad.closed()
	}

	requests := []struct {
		cmd  string
		want float64
	}{
		{cmd: "l", want: 3},
		{cmd: "r", want: 2},
		{cmd: "sl", want: 2},
		{cmd: "sr", want: 2},
		{cmd: "n", want: 0},
	}
	for _, tt := range requests {
		if got := counter(t, reg, "latchd_tcp_requests_total", "cmd", tt.cmd); got != tt.want {
			t.Errorf("requests{cmd=%q} = %v; want %v", tt.cmd, got, tt.want)
		}
		if got := float64(histogram(t, reg, tt.cmd).GetSampleCount()); got != tt.want {
			t.Errorf("latency count{cmd=%q} = %v; want %v", tt.cmd, got, tt.want)
		}
	}
	// Two of the three locks were answered at once, one after held.
	h := histogram(t, reg, "l")
	if h.GetSampleSum() < held.Seconds() {
		t.Errorf("l latency sum %vs; want >= %v (the parked one)", h.GetSampleSum(), held.Seconds())
	}
	for _, b := range h.Bucket {
		if b.GetUpperBound() == 0.05 && b.GetCumulativeCount() != 2 {
			t.Errorf("l latency le=0.05 holds %d; want 2 (the parked lock is slower)", b.GetCumulativeCount())
		}
	}
	reasons := []struct {
		reason string
		want   float64
	}{
		{reason: "bad_int", want: 1},
		{reason: "unknown_cmd", want: 1},
		{reason: "bad_key", want: 1},
		{reason: "auth", want: 0},
	}
	for _, tt := range reasons {
		if got := counter(t, reg, "latchd_tcp_protocol_errors_total", "reason", tt.reason); got != tt.want {
			t.Errorf("protocol errors{reason=%q} = %v; want %v", tt.reason, got, tt.want)
		}
	}
	if got, want := s.TCP.Violations(), uint64(3); got != want {
		t.Errorf("Violations() = %d; want %d", got, want)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		return counter(t, reg, "latchd_tcp_connections") == 2
	}, "closed connections leave latchd_tcp_connections")
}

func TestMetricsRefusedAndAuth(t *testing.T) {
	reg := metrics.NewRegistry(nil)
	s := servertest.StartServerWith(t, []server.Option{server.WithMetrics(reg.TCP())},
		func(_ *engine.Config, c *server.Config) { c.MaxConnections = 1; c.AuthToken = "s3cret" })
	first := dial(t, s.Addr)
	if got := first.do("auth", "_", "s3cret"); got != "ok" {
		t.Fatalf("auth: %q", got)
	}
	refused := dial(t, s.Addr)
	if got := refused.line(); got != "error" {
		t.Fatalf("over the cap: got %q; want error", got)
	}
	refused.closed()
	if got := counter(t, reg, "latchd_tcp_connections_refused_total", "reason", "max_connections"); got != 1 {
		t.Errorf("refused{max_connections} = %v; want 1", got)
	}
	if got := counter(t, reg, "latchd_tcp_connections_refused_total", "reason", "max_connections_per_ip"); got != 0 {
		t.Errorf("refused{max_connections_per_ip} = %v; want 0", got)
	}
	if got := s.TCP.Refused(); got != 1 {
		t.Errorf("Refused() = %d; want 1", got)
	}
	_ = first.c.Close()
	testutil.Eventually(t, 5*time.Second, func() bool { return s.TCP.Connections() == 0 }, "first connection closed")

	noAuth := dial(t, s.Addr)
	if got := noAuth.do("l", "k", "0"); got != "error_auth" {
		t.Fatalf("lock before auth: %q; want error_auth", got)
	}
	noAuth.closed()
	if got := counter(t, reg, "latchd_tcp_protocol_errors_total", "reason", "auth"); got != 1 {
		t.Errorf("protocol errors{reason=auth} = %v; want 1", got)
	}
	if got := counter(t, reg, "latchd_tcp_requests_total", "cmd", "auth"); got != 1 {
		t.Errorf("requests{cmd=auth} = %v; want 1", got)
	}
}
