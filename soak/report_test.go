package soak

import (
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
)

// Logger is what a Report logs to; *testing.T is one.
type Logger interface {
	Logf(format string, args ...any)
}

// Report is what a soak test tried and what survived: one row per check,
// with the violations it found (every row must show 0).
type Report struct {
	Title string

	mu    sync.Mutex
	notes []string
	rows  []reportRow
	viol  []Violation
}

type reportRow struct {
	check, tried, result string
	violations           int
}

// NewReport starts a report.
func NewReport(title string) *Report { return &Report{Title: title} }

// Add records a check: what was tried, what came of it, and the violations
// it found.
func (r *Report) Add(check, tried, result string, v []Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, reportRow{check, tried, result, len(v)})
	r.viol = append(r.viol, v...)
}

// Note records a line that checks nothing: a figure for the reader,
// printed above the table.
func (r *Report) Note(what, figure string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, what+": "+figure)
}

// Violations returns every violation added.
func (r *Report) Violations() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Violation(nil), r.viol...)
}

// String renders the report as a table.
func (r *Report) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "== %s ==\n", r.Title)
	for _, n := range r.notes {
		fmt.Fprintf(&b, "%s\n", n)
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "check\ttried\tresult\tviolations")
	total := 0
	for _, row := range r.rows {
		total += row.violations
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", row.check, row.tried, row.result, row.violations)
	}
	fmt.Fprintf(tw, "TOTAL\t\t\t%d\n", total)
	_ = tw.Flush()
	return b.String()
}

// Log writes the table to l, then up to limit violations in full.
func (r *Report) Log(l Logger, limit int) {
	l.Logf("\n%s", r)
	v := r.Violations()
	for i, x := range v {
		if i == limit {
			l.Logf("... and %d more violations", len(v)-limit)
			break
		}
		l.Logf("violation %s", x)
	}
}
