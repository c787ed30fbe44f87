package soak_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latchd/soak"
)

// TestInvariantsUnderLoad runs cfg.Clients random clients on a few hot
// keys and many cold ones (acquiring, renewing, e/w, sleeping past their
// lease, resetting their connection while holding or waiting,
// reconnecting) and checks: never more holders than the limit on a key
// (client-observed intervals and the server's own snapshots), fences
// strictly increasing, every blocking request answered once within its
// timeout plus slack and never before it, no lease ending early, and
// nothing held, queued or kept once the clients are gone.
func TestInvariantsUnderLoad(t *testing.T) {
	cfg := config(t)
	s := startServer(t, cfg)
	rep := soak.NewReport(fmt.Sprintf("invariants under random load (%s)", cfg.Name))
	h := soak.NewHistory()
	watch := soak.Watch(s.Engine, cfg.StaleSlack)
	load := soak.StartLoad(s.Addr, cfg, h, uint64(time.Now().UnixNano()))
	load.Wait()
	elapsed := h.Now()

	// Every client has finished its last action and released what it
	// held; only lapsing leases of dropped connections may remain.
	quiet := soak.PollUntil(5*time.Second, func() bool {
		_, g := s.Engine.Metrics()
		return g.Held == 0 && g.Waiting == 0
	})
	var quietV []soak.Violation
	if !quiet {
		quietV = append(quietV, soak.Violation{Check: "wake-ups", Detail: "with every client idle and connected: " + gauges(s)})
	}
	load.Close()
	polls, watchV := watch.Stop()
	peakHeld, peakWait, peakKeys := watch.Peaks()
	endV := settled(s, 0, 5*time.Second)

	st := load.Stats()
	grants, waits := h.Grants(), h.Waits()
	rep.Note("load", fmt.Sprintf("%d clients for %v on %d hot locks, %d hot semaphores (limit %d), %d cold keys",
		cfg.Clients, elapsed.Round(time.Millisecond), cfg.HotLocks, cfg.HotSems, cfg.SemLimit, cfg.ColdKeys))
	rep.Note("operations", st.String())
	rep.Note("faults injected", fmt.Sprintf("%d paused past lease, %d reset holding, %d reset waiting",
		st.Pauses.Load(), st.DropHolding.Load(), st.DropWaiting.Load()))
	n, v := soak.CheckHolders(grants)
	rep.Add("holders <= limit (client intervals)", fmt.Sprintf("%d grants, %d with a proven interval", len(grants), n), "", v)
	rep.Add("holders <= limit (server snapshots)", fmt.Sprintf("%d snapshots", polls),
		fmt.Sprintf("peak held %d, waiting %d, keys %d", peakHeld, peakWait, peakKeys), watchV)
	n, v = soak.CheckFences(grants)
	rep.Add("fences strictly increasing", fmt.Sprintf("%d grants", n), "", v)
	worst, v := soak.CheckWaits(waits, cfg.Slack)
	rep.Add("answers within timeout + slack", fmt.Sprintf("%d blocking requests", len(waits)),
		fmt.Sprintf("worst %v past timeout (slack %v)", worst.Round(time.Millisecond), cfg.Slack), v)
	rep.Add("leases, answers, connections", "every request", "", h.Direct())
	rep.Add("no lost wake-ups: quiet while connected", "held=0 waiting=0", "", quietV)
	rep.Add("no lost wake-ups: empty after disconnect", "keys=held=waiting=conns=0", gauges(s), endV)
	if len(grants) == 0 || st.Timeouts.Load() == 0 || st.Lapsed.Load() == 0 {
		rep.Add("load reached every path", "grants, timeouts, lapsed leases", "", []soak.Violation{{Check: "load",
			Detail: fmt.Sprintf("%d grants, %d timeouts, %d lapsed: the load is too thin to test anything", len(grants), st.Timeouts.Load(), st.Lapsed.Load())}})
	}
	finish(t, rep)
}
