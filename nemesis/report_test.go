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
	runs, ops, grants  int
	muxGrants, muxErrs int // the Mux workload's grants, and its acquires that failed
	failover           []time.Duration
	anomalies, notes   []string
}

// rows counts, per fault, what happened in its windows; what happened
// before the first fault is in before, anomalies outside every window in
// global.
type rows struct {
	wins   []*window
	rows   []row
	before row
	global []string
}

// in returns the window at falls in, or nil.
func (rs *rows) in(at int64) *window {
	i := sort.Search(len(rs.wins), func(i int) bool { return rs.wins[i].end > at })
	if i < len(rs.wins) && rs.wins[i].start <= at {
		return rs.wins[i]
	}
	return nil
}

// count calls f for the row of each of ts.
func (rs *rows) count(ts []int64, f func(r *row)) {
	for _, at := range ts {
		if w := rs.in(at); w != nil {
			f(&rs.rows[w.fault])
		} else {
			f(&rs.before)
		}
	}
}

// anomalies adds as to the rows of their windows, or to global. notes
// are not anomalies.
func (rs *rows) anomalies(as []anomaly, notes bool) {
	for _, a := range as {
		switch w := rs.in(a.at); {
		case w != nil && notes:
			rs.rows[w.fault].notes = append(rs.rows[w.fault].notes, a.what)
		case w != nil:
			rs.rows[w.fault].anomalies = append(rs.rows[w.fault].anomalies, a.what)
		case notes:
			rs.before.notes = append(rs.before.notes, a.what)
		default:
			rs.global = append(rs.global, a.what)
		}
	}
}

// report prints the summary table and returns the number of anomalies.
func report(t *testing.T, wins []*window, res *resource, tl *timeline, ml *muxLoad, lins []lincheck.Result, global []string, margins []time.Duration) int {
	rs := &rows{wins: wins, rows: make([]row, len(faults)), global: global}
	rs.count(tl.calls, func(r *row) { r.ops++ })
	rs.count(tl.grants, func(r *row) { r.grants++ })
	rs.count(ml.grants, func(r *row) { r.muxGrants++ })
	rs.count(ml.errs, func(r *row) { r.muxErrs++ })
	rs.anomalies(res.bad, false)
	rs.anomalies(ml.bad, false)
	rs.anomalies(ml.notes, true)
	for _, w := range wins {
		r := &rs.rows[w.fault]
		r.runs++
		if w.served {
			r.failover = append(r.failover, w.failover)
		}
		for _, a := range w.notes {
			r.anomalies = append(r.anomalies, a.what)
		}
	}
	var b strings.Builder
	total, nfaults, missed := rs.table(t, &b)
	var lin lincheck.Result
	for _, l := range lins {
		lin.Ops, lin.Unknown, lin.Grants = lin.Ops+l.Ops, lin.Unknown+l.Unknown, lin.Grants+l.Grants
	}
	fmt.Fprintf(&b, "checked: %d operations (%d of unknown outcome), %d grants, in %d histories, each linearizable with every replica's final state; fenced resource: %d writes accepted\n",
		lin.Ops, lin.Unknown, lin.Grants, len(lins), res.writes)
	fmt.Fprintf(&b, "mux: %d acquires over tagged sessions (%s); %d Muxes had %d sessions; checked for orphan grants after every phase\n",
		len(ml.calls), ml.kindList(), ml.muxes, ml.sessions)
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

// table writes the table to b and logs each anomaly and note. It returns
// the anomalies, the faults and those whose failover missed its target.
func (rs *rows) table(t *testing.T, b *strings.Builder) (total, nfaults int, missed []string) {
	const format = "%-32s %5v %8d %7d %8d %7d %13s %14s %9d\n"
	fmt.Fprintf(b, "%-32s %5s %8s %7s %8s %7s %13s %14s %9s\n", "fault", "runs", "ops", "grants", "mux-ok", "mux-err", "failover p50", "failover max", "anomalies")
	for i, r := range rs.rows {
		p50, worst := "-", "-"
		if len(r.failover) > 0 {
			sort.Slice(r.failover, func(a, b int) bool { return r.failover[a] < r.failover[b] })
			m, x := r.failover[(len(r.failover)-1)/2], r.failover[len(r.failover)-1]
			p50, worst = m.Round(time.Millisecond).String(), x.Round(time.Millisecond).String()
			if m > 2*time.Second || x > 5*time.Second {
				missed = append(missed, faults[i].name)
			}
		}
		fmt.Fprintf(b, format, faults[i].name, r.runs, r.ops, r.grants, r.muxGrants, r.muxErrs, p50, worst, len(r.anomalies))
		total += len(r.anomalies)
		nfaults += r.runs
		for _, a := range r.anomalies {
			t.Logf("anomaly (%s): %s", faults[i].name, a)
		}
		for _, a := range r.notes {
			t.Logf("note (%s): %s", faults[i].name, a)
		}
	}
	r := rs.before
	fmt.Fprintf(b, format, "(no fault: start)", "-", r.ops, r.grants, r.muxGrants, r.muxErrs, "-", "-", 0)
	for _, a := range r.notes {
		t.Logf("note: %s", a)
	}
	for _, g := range rs.global {
		t.Logf("anomaly: %s", g)
	}
	return total + len(rs.global), nfaults, missed
}
