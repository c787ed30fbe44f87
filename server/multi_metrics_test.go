package server_test

import (
	"testing"
	"time"

	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// TestMetricsMultiOverTCP: ml and msl are counted and timed by their own
// cmd label, a queued set until its grant is taken.
func TestMetricsMultiOverTCP(t *testing.T) {
	reg := metrics.NewRegistry(nil)
	s := servertest.StartServerWith(t, []server.Option{server.WithMetrics(reg.TCP())})
	a, c := dial(t, s.Addr), dial(t, s.Addr)
	grants(t, c.do("ml", "x y", "0"), 2)
	grants(t, c.do("msl", "s1 s2", "0 3"), 2)
	tb := grant(t, a.do("l", "b", "0"), "ok")
	c.req("ml", "a b", "30")
	testutil.Eventually(t, 5*time.Second, func() bool { return waiters(s, "a") == 1 }, "set queued on a")
	const held = 60 * time.Millisecond
	time.Sleep(held) // not a wait for a condition: the parked set's latency
	if got := a.do("r", "b", tb); got != "ok" {
		t.Fatal(got)
	}
	grants(t, c.line(), 2)
	for _, tt := range []struct {
		cmd  string
		want float64
	}{{"ml", 2}, {"msl", 1}} {
		if got := counter(t, reg, "latchd_tcp_requests_total", "cmd", tt.cmd); got != tt.want {
			t.Errorf("requests{cmd=%q} = %v; want %v", tt.cmd, got, tt.want)
		}
		testutil.Eventually(t, 5*time.Second, func() bool {
			return float64(histogram(t, reg, tt.cmd).GetSampleCount()) == tt.want
		}, "latency of every "+tt.cmd+" recorded")
	}
	if sum := histogram(t, reg, "ml").GetSampleSum(); sum < held.Seconds() {
		t.Errorf("ml latency sum %vs; want >= %v (the queued set)", sum, held.Seconds())
	}
}
