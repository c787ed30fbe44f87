package bench

import (
	"context"
	"encoding/json"
	"io"
	"sync/atomic"
	"time"
)

// Sweep runs every target at every worker count of cfg. Targets alternate
// within each worker count (A at 10, B at 10, A at 50, B at 50, ...), so a
// comparison sees the same machine conditions on both sides. progress, if
// not nil, counts finished ops as they happen. Rows come back in run order
// with Ratio filled in.
func Sweep(ctx context.Context, cfg Config, progress *atomic.Int64) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var out []Result
	for _, w := range cfg.Workers {
		first := len(out)
		for _, t := range cfg.Targets {
			r, err := Run(ctx, cfg, t, w, progress)
			if err != nil {
				return out, err
			}
			out = append(out, r)
		}
		setRatios(out[first:])
	}
	return out, nil
}

// setRatios sets each row's Ratio against the first row's throughput.
func setRatios(rows []Result) {
	if len(rows) == 0 {
		return
	}
	base := rows[0].Throughput
	for i := range rows {
		if rows[i].Throughput > 0 {
			rows[i].Ratio = base / rows[i].Throughput
		}
	}
}

// TotalOps is how many ops a rounds-mode sweep of cfg runs, for a progress
// bar; 0 in duration mode.
func TotalOps(cfg Config) int64 {
	if cfg.Duration > 0 {
		return 0
	}
	var n int64
	for _, w := range cfg.Workers {
		n += int64(w) * int64(cfg.Rounds) * int64(len(cfg.Targets))
	}
	return n
}

// TotalDuration is how long a duration-mode sweep of cfg runs, not counting
// connection set-up; 0 in rounds mode.
func TotalDuration(cfg Config) time.Duration {
	return cfg.Duration * time.Duration(len(cfg.Workers)*len(cfg.Targets))
}

// jsonRow is a Result as --json prints it: latencies in milliseconds.
type jsonRow struct {
	Target     string  `json:"target"`
	Kind       Kind    `json:"kind"`
	Addr       string  `json:"addr"`
	Mode       Mode    `json:"mode"`
	Workers    int     `json:"workers"`
	Rounds     int     `json:"rounds,omitempty"`
	DurationS  float64 `json:"duration_s,omitempty"`
	Rate       float64 `json:"rate,omitempty"`
	Ops        int64   `json:"ops"`
	Errors     int64   `json:"errors"`
	ElapsedS   float64 `json:"elapsed_s"`
	Throughput float64 `json:"throughput_ops_s"`
	MeanMs     float64 `json:"mean_ms"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	P999Ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	Ratio      float64 `json:"ratio,omitempty"`
}

// WriteJSON writes rs as one JSON document: {"results":[...]}.
func WriteJSON(w io.Writer, rs []Result) error {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rows := make([]jsonRow, len(rs))
	for i, r := range rs {
		rows[i] = jsonRow{
			Target: r.Target.Name, Kind: r.Target.Kind, Addr: r.Target.Addr,
			Mode: r.Mode, Workers: r.Workers, Rounds: r.Rounds,
			DurationS: r.Duration.Seconds(), Rate: r.Rate,
			Ops: r.Ops, Errors: r.Errors, ElapsedS: r.Elapsed.Seconds(),
			Throughput: r.Throughput, MeanMs: ms(r.Mean), P50Ms: ms(r.P50),
			P99Ms: ms(r.P99), P999Ms: ms(r.P999), MaxMs: ms(r.Max), Ratio: r.Ratio,
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Results []jsonRow `json:"results"`
	}{rows})
}
