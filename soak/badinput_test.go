package soak_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latchd/soak"
)

// TestBadInputSparesBystanders floods the server with random bytes,
// over-long lines, slowloris trickles, half-closed sockets and pipelining
// past MaxParked, all at once, while bystanders hold locks and keep
// working. Each flood connection must be closed (with "error" or by the
// read timeout, never before it), the bystanders must keep their locks
// and their latency, the violations counter must rise, and nothing may be
// left behind.
func TestBadInputSparesBystanders(t *testing.T) {
	cfg := config(t)
	s := startServer(t, cfg)
	rep := soak.NewReport(fmt.Sprintf("bad input beside well-behaved clients (%s)", cfg.Name))
	by, err := soak.StartBystanders(s.Addr, cfg.Bystanders)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(by.Close)
	// A baseline of bystander latency before the flood.
	if !soak.PollUntil(30*time.Second, func() bool { return by.Ops(0) >= 40*cfg.Bystanders }) {
		t.Fatalf("bystanders made %d operations in 30 s", by.Ops(0))
	}
	violations0 := s.TCP.Violations()
	by.Phase(1)
	start := time.Now()
	floods := soak.Flood(s.Addr, cfg, soak.HoldKey(0))
	floodTime := time.Since(start)
	by.Stop()
	violations := s.TCP.Violations() - violations0

	// The bystanders hold exactly their hold locks; nobody waits on them.
	var leftV []soak.Violation
	if !soak.PollUntil(5*time.Second, func() bool {
		_, g := s.Engine.Metrics()
		return g.Held == cfg.Bystanders && g.Waiting == 0 && s.TCP.Connections() == cfg.Bystanders
	}) {
		leftV = append(leftV, soak.Violation{Check: "flood", Detail: fmt.Sprintf(
			"after the flood: %s, want held=%d waiting=0 conns=%d", gauges(s), cfg.Bystanders, cfg.Bystanders)})
	}
	by.Close()
	endV := settled(s, 0, 5*time.Second)

	conns, closed, errs, expectViol := 0, 0, 0, 0
	var sent int64
	for _, f := range floods {
		conns += f.Conns
		closed += f.Closed
		errs += f.ErrorLines
		sent += f.Bytes
		if f.Kind != "half-closed" {
			expectViol += f.Closed
		}
		rep.Add("flood: "+f.Kind, fmt.Sprintf("%d conns, %d KiB", f.Conns, f.Bytes>>10),
			fmt.Sprintf("%d closed (%d with error, %d answers), longest %v", f.Closed, f.ErrorLines, f.Answers,
				f.MaxLife.Round(time.Millisecond)), f.Violations)
	}
	rep.Note("flood", fmt.Sprintf("%d connections, %d KiB in %v, read timeout %v", conns, sent>>10,
		floodTime.Round(time.Millisecond), cfg.ReadTimeout))
	var counterV []soak.Violation
	if violations < uint64(expectViol) {
		counterV = append(counterV, soak.Violation{Check: "flood", Detail: fmt.Sprintf(
			"server counted %d violations, want >= %d", violations, expectViol)})
	}
	rep.Add("server Violations() rose", fmt.Sprintf("%d bad connections", expectViol), fmt.Sprintf("+%d", violations), counterV)

	p50, p99, worst, ops, alive, byV := by.Result()
	rep.Add("bystanders' requests", fmt.Sprintf("%d bystanders, %d ops before, %d during", cfg.Bystanders, ops[0], ops[1]),
		"every answer as expected", byV)
	var keptV []soak.Violation
	if alive != cfg.Bystanders {
		keptV = append(keptV, soak.Violation{Check: "bystanders", Detail: fmt.Sprintf("%d of %d hold locks survived", alive, cfg.Bystanders)})
	}
	rep.Add("bystanders keep their locks", fmt.Sprintf("%d locks renewed after", cfg.Bystanders), fmt.Sprintf("%d kept", alive), keptV)
	var latV []soak.Violation
	if p99[1] > cfg.P99Bound {
		latV = append(latV, soak.Violation{Check: "bystanders", Detail: fmt.Sprintf("p99 %v during the flood, bound %v", p99[1], cfg.P99Bound)})
	}
	rep.Add("bystanders keep their latency", fmt.Sprintf("p99 <= %v", cfg.P99Bound), fmt.Sprintf(
		"before p50 %v p99 %v max %v; during p50 %v p99 %v max %v",
		p50[0].Round(10*time.Microsecond), p99[0].Round(10*time.Microsecond), worst[0].Round(10*time.Microsecond),
		p50[1].Round(10*time.Microsecond), p99[1].Round(10*time.Microsecond), worst[1].Round(10*time.Microsecond)), latV)
	rep.Add("nothing left behind", "held=bystanders, then all 0", gauges(s), append(leftV, endV...))
	if ops[1] == 0 {
		t.Errorf("bystanders made no request during the flood")
	}
	finish(t, rep)
}
