package bench

import (
	"io"
	"strconv"
	"time"
)

// TableOptions chooses the table's extra columns.
type TableOptions struct {
	// Compare, for rows of more than one target, adds a leading Target
	// column and a trailing Ratio: the first target's throughput divided
	// by the row's.
	Compare bool
	// Errors adds an Errors column (refused ops).
	Errors bool
	// CPU adds the CPU columns: the cores the row kept busy, and the
	// CPU time of one op ("-" for a target that names no processes).
	CPU bool
}

// WriteTable writes rs as a Markdown table in the shape of dflockd's
// README: | Workers | Rounds | Ops | Throughput | Mean | p50 | p99 | p99.9 |.
func WriteTable(w io.Writer, rs []Result, opt TableOptions) error {
	var b []byte
	h := header(opt)
	b = appendSep(appendRow(b, h), len(h))
	for _, r := range rs {
		b = appendRow(b, Row(r, opt))
	}
	_, err := w.Write(b)
	return err
}

func header(opt TableOptions) []string {
	h := make([]string, 0, 12)
	if opt.Compare {
		h = append(h, "Target")
	}
	h = append(h, "Workers", "Rounds", "Ops", "Throughput", "Mean", "p50", "p99", "p99.9")
	if opt.Errors {
		h = append(h, "Errors")
	}
	if opt.CPU {
		h = append(h, "CPU cores", "CPU/op")
	}
	if opt.Compare {
		h = append(h, "Ratio")
	}
	return h
}

// Row returns the table cells of r.
func Row(r Result, opt TableOptions) []string {
	row := make([]string, 0, 12)
	if opt.Compare {
		row = append(row, r.Target.Name)
	}
	rounds := FormatCount(int64(r.Rounds))
	if r.Duration > 0 {
		rounds = r.Duration.String()
	}
	row = append(row,
		FormatCount(int64(r.Workers)),
		rounds,
		FormatCount(r.Ops),
		FormatRate(r.Throughput),
		FormatMillis(r.Mean),
		FormatMillis(r.P50),
		FormatMillis(r.P99),
		FormatMillis(r.P999),
	)
	if opt.Errors {
		row = append(row, FormatCount(r.Errors))
	}
	if opt.CPU {
		row = append(row, formatCPU(r)...)
	}
	if opt.Compare {
		row = append(row, FormatRatio(r.Ratio))
	}
	return row
}

// formatCPU writes r's CPU cells: "1.93", "0.152 ms"; "-" twice when
// the row measured none.
func formatCPU(r Result) []string {
	if r.CPU <= 0 {
		return []string{"-", "-"}
	}
	return []string{strconv.FormatFloat(r.cores(), 'f', 2, 64), FormatMillis(r.cpuPerOp())}
}

func appendRow(b []byte, cells []string) []byte {
	b = append(b, '|')
	for _, c := range cells {
		b = append(b, ' ')
		b = append(b, c...)
		b = append(b, " |"...)
	}
	return append(b, '\n')
}

func appendSep(b []byte, n int) []byte {
	b = append(b, '|')
	for range n {
		b = append(b, "---|"...)
	}
	return append(b, '\n')
}

// FormatCount writes n with thousands separators: 1,000.
func FormatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// FormatRate writes a throughput rounded to whole ops: "13,440 ops/s".
func FormatRate(opsPerSec float64) string {
	return FormatCount(int64(opsPerSec+0.5)) + " ops/s"
}

// FormatMillis writes a latency in milliseconds with three decimals:
// "0.074 ms".
func FormatMillis(d time.Duration) string {
	return strconv.FormatFloat(ms(d), 'f', 3, 64) + " ms"
}

// FormatRatio writes a ratio with two decimals: "1.52x"; "-" when unknown.
func FormatRatio(r float64) string {
	if r <= 0 {
		return "-"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "x"
}
