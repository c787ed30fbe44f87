//go:build soak

package soak_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/soak"
)

// Sizes of the output-amplification attack: keys with
// long names make each stats answer about 330 KiB; each attacker pipelines
// stats requests and never reads.
const (
	ampKeys      = 1000
	ampKeyLen    = 250
	ampAttackers = 400
	ampPerConn   = 20
	ampDuration  = 15 * time.Second // attackers stay connected this long
	ampHeapBound = 256 << 20        // heap growth allowed meanwhile
	ampP99Bound  = 500 * time.Millisecond
)

// TestAmplificationSparesBystanders runs the attack against a server with
// default output bounds while bystanders hold locks and keep working. The
// heap must stay bounded, the unsent output within the budget, the
// bystanders' latency too, and the heap must come back after they go.
func TestAmplificationSparesBystanders(t *testing.T) {
	cfg := config(t)
	s := startServer(t, cfg)
	rep := soak.NewReport(fmt.Sprintf("stats amplification beside well-behaved clients (%s)", cfg.Name))
	// One connection holds the keys (idle keys would be collected).
	holder, err := soak.Dial(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	var b strings.Builder
	for i := range ampKeys {
		fmt.Fprintf(&b, "l\n%0*d\n0 600\n", ampKeyLen, i)
	}
	if err := holder.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	for i := range ampKeys {
		if line, err := holder.ReadLine(time.Now().Add(10 * time.Second)); err != nil || !strings.HasPrefix(line, "ok ") {
			t.Fatalf("key %d: %q, %v", i, line, err)
		}
	}
	by, err := soak.StartBystanders(s.Addr, cfg.Bystanders)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(by.Close)
	if !soak.PollUntil(30*time.Second, func() bool { return by.Ops(0) >= 40*cfg.Bystanders }) {
		t.Fatalf("bystanders made %d operations in 30 s", by.Ops(0))
	}
	base := soak.Settle()
	violations0 := s.TCP.Violations()
	by.Phase(1)

	req := []byte(strings.Repeat("stats\n_\n\n", ampPerConn))
	att := make([]*soak.Conn, 0, ampAttackers)
	var peak uint64
	var budgetPeak int64
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
		budgetPeak = max(budgetPeak, s.TCP.OutputBudget().Used())
	}
	var dialV []soak.Violation
	for range ampAttackers {
		c, err := soak.Dial(s.Addr)
		if err == nil {
			err = c.Write(req)
		}
		if err != nil {
			dialV = append(dialV, soak.Violation{Check: "attack", Detail: err.Error()})
			break
		}
		att = append(att, c)
		sample()
	}
	end := time.Now().Add(ampDuration)
	for time.Now().Before(end) {
		sample()
		time.Sleep(50 * time.Millisecond)
	}
	open := s.TCP.Connections() - cfg.Bystanders - 1
	held := s.TCP.OutputBudget().Used()
	by.Stop()
	for _, c := range att {
		_ = c.Abort()
	}
	closedAt := time.Now()
	violations := s.TCP.Violations() - violations0

	var heapV []soak.Violation
	if peak > base.HeapInuse+ampHeapBound {
		heapV = append(heapV, soak.Violation{Check: "heap", Detail: fmt.Sprintf("heap in use peaked at %s over a base of %s",
			soak.MiB(peak), soak.MiB(base.HeapInuse))})
	}
	rep.Add("heap under attack", fmt.Sprintf("%d conns x %d stats of ~330 KiB, never read", len(att), ampPerConn),
		fmt.Sprintf("heap in use: base %s, peak %s (bound +%s)", soak.MiB(base.HeapInuse), soak.MiB(peak), soak.MiB(ampHeapBound)),
		append(dialV, heapV...))
	// An attacker whose answers the kernel took whole (loopback buffers
	// are large) holds nothing in the server and may stay open; what
	// matters is that the unsent output stays within the budget.
	var budgetV []soak.Violation
	if max := server.DefaultConfig().MaxOutput; budgetPeak > max+int64(2*server.DefaultConfig().MaxStatsBytes) {
		budgetV = append(budgetV, soak.Violation{Check: "budget", Detail: fmt.Sprintf("unsent output peaked at %s, budget %s",
			soak.MiB(uint64(budgetPeak)), soak.MiB(uint64(max)))})
	}
	rep.Add("unsent output within the budget", soak.MiB(uint64(server.DefaultConfig().MaxOutput)),
		fmt.Sprintf("peak %s; %d attackers closed for their output, %d open holding %s", soak.MiB(uint64(budgetPeak)),
			violations, max(open, 0), soak.MiB(uint64(held))), budgetV)
	p50, p99, worst, ops, alive, byV := by.Result()
	rep.Add("bystanders' requests", fmt.Sprintf("%d bystanders, %d ops before, %d during", cfg.Bystanders, ops[0], ops[1]),
		"every answer as expected", byV)
	var latV []soak.Violation
	if p99[1] > ampP99Bound {
		latV = append(latV, soak.Violation{Check: "bystanders", Detail: fmt.Sprintf("p99 %v during the attack, bound %v", p99[1], ampP99Bound)})
	}
	if alive != cfg.Bystanders {
		latV = append(latV, soak.Violation{Check: "bystanders", Detail: fmt.Sprintf("%d of %d hold locks survived", alive, cfg.Bystanders)})
	}
	rep.Add("bystanders keep their locks and latency", fmt.Sprintf("p99 <= %v", ampP99Bound), fmt.Sprintf(
		"before p50 %v p99 %v max %v; during p50 %v p99 %v max %v",
		p50[0].Round(10*time.Microsecond), p99[0].Round(10*time.Microsecond), worst[0].Round(10*time.Microsecond),
		p50[1].Round(10*time.Microsecond), p99[1].Round(10*time.Microsecond), worst[1].Round(10*time.Microsecond)), latV)

	after, ok := soak.SettleTo(2*base.HeapAlloc+(4<<20), 10*time.Second)
	var backV []soak.Violation
	if u := s.TCP.OutputBudget().Used(); u != 0 {
		backV = append(backV, soak.Violation{Check: "budget", Detail: fmt.Sprintf("%d bytes still counted after the attackers closed", u)})
	}
	if !ok {
		backV = append(backV, soak.Violation{Check: "heap", Detail: fmt.Sprintf("heap %s 10 s after the attackers closed, base %s",
			soak.MiB(after.HeapAlloc), soak.MiB(base.HeapAlloc))})
	}
	rep.Add("memory back after they close", "within 10 s, 2x the base", fmt.Sprintf("heap %s after %v (base %s)",
		soak.MiB(after.HeapAlloc), time.Since(closedAt).Round(time.Millisecond), soak.MiB(base.HeapAlloc)), backV)
	if ops[1] == 0 {
		t.Errorf("bystanders made no request during the attack")
	}
	finish(t, rep)
}
