//go:build nemesis

package nemesis

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/lincheck"
)

// row is one line of the summary: a fault kind over all its injections.
type row struct {
	runs, ops, grants int
	failover          []time.Duration
	anomalies         []string
}

// report prints the summary table and returns the number of anomalies.
func report(t *testing.T, wins []*window, res *resource, tl *timeline, lins []lincheck.Result, global []string, margins []time.Duration) int {
	rows := make([]row, len(faults))
	in := func(at int64) *window {
		i := sort.Search(len(wins), func(i int) bool { return wins[i].end > at })
		if i < len(wins) && wins[i].start <= at {
			return wins[i]
		}
		return nil
	}
	var before row // before the first fault
	count := func(ts []int64, f func(r *row)) {
		for _, at := range ts {
			if w := in(at); w != nil {
				f(&rows[w.fault])
			} else {
				f(&before)
			}
		}
	}
	count(tl.calls, func(r *row) { r.ops++ })
	count(tl.grants, func(r *row) { r.grants++ })
	for _, a := range res.bad {
		if w := in(a.at); w != nil {
			rows[w.fault].anomalies = append(rows[w.fault].anomalies, a.what)
		} else {
			global = append(global, a.what)
		}
	}
	for _, w := range wins {
		r := &rows[w.fault]
		r.runs++
		if w.served {
			r.failover = append(r.failover, w.failover)
		}
		for _, a := range w.notes {
			r.anomalies = append(r.anomalies, a.what)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-32s %5s %8s %7s %13s %14s %9s\n", "fault", "runs", "ops", "grants", "failover p50", "failover max", "anomalies")
	total, nfaults := len(global), 0
	var missed []string
	for i, r := range rows {
		p50, worst := "-", "-"
		if len(r.failover) > 0 {
			sort.Slice(r.failover, func(a, b int) bool { return r.failover[a] < r.failover[b] })
			m, x := r.failover[(len(r.failover)-1)/2], r.failover[len(r.failover)-1]
			p50, worst = m.Round(time.Millisecond).String(), x.Round(time.Millisecond).String()
			if m > 2*time.Second || x > 5*time.Second {
				missed = append(missed, faults[i].name)
			}
		}
		fmt.Fprintf(&b, "%-32s %5d %8d %7d %13s %14s %9d\n", faults[i].name, r.runs, r.ops, r.grants, p50, worst, len(r.anomalies))
		total += len(r.anomalies)
		nfaults += r.runs
		for _, a := range r.anomalies {
			t.Logf("anomaly (%s): %s", faults[i].name, a)
		}
	}
	fmt.Fprintf(&b, "%-32s %5s %8d %7d %13s %14s %9d\n", "(no fault: start)", "-", before.ops, before.grants, "-", "-", 0)
	for _, g := range global {
		t.Logf("anomaly: %s", g)
	}
	var lin lincheck.Result
	for _, l := range lins {
		lin.Ops, lin.Unknown, lin.Grants = lin.Ops+l.Ops, lin.Unknown+l.Unknown, lin.Grants+l.Grants
	}
	fmt.Fprintf(&b, "checked: %d operations (%d of unknown outcome), %d grants, in %d histories, each linearizable with every replica's final state; fenced resource: %d writes accepted\n",
		lin.Ops, lin.Unknown, lin.Grants, len(lins), res.writes)
	fmt.Fprintf(&b, "failover: fault to the first grant (by another node, when the fault takes the leader out); target p50 <= 2s, max <= 5s; missed by: %s\n",
		strings.Join(append(missed, "none")[:max(1, len(missed))], ", "))
	if len(margins) > 0 {
		sort.Slice(margins, func(a, b int) bool { return margins[a] < margins[b] })
		fmt.Fprintf(&b, "run-under-lock: %d runs, the first CMD got SIGTERM before the second started by %v (min) to %v (max)\n",
			len(margins), margins[0].Round(time.Millisecond), margins[len(margins)-1].Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "nemesis: %d operations, %d faults, %d anomalies\n", lin.Ops, nfaults, total)
	fmt.Print(b.String())
	return total
}
