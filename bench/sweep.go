package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/codec"
)

// Sweep runs every target at every worker count of cfg, the targets
// alternating within each count so that they see the same machine
// conditions. progress, if not nil, counts finished ops. Rows come back in
// run order with Ratio filled in.
func Sweep(ctx context.Context, cfg Config, progress *atomic.Int64) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var out []Result
	for _, w := range cfg.Workers {
		first := len(out)
		for _, t := range cfg.Targets {
			r, err := runCPU(func() (Result, error) { return Run(ctx, cfg, t, w, progress) }, cfg.PIDs[t.Name])
			if err != nil {
				return out, err
			}
			out = append(out, r)
			if r.Ops == 0 && r.Errors > 0 {
				// Every op was refused: the rows after it would measure
				// the same refusal.
				setRatios(out[first:])
				return out, allRefused(r)
			}
		}
		setRatios(out[first:])
	}
	return out, nil
}

// ErrAllRefused reports a row in which the server refused every op.
var ErrAllRefused = errors.New("bench: the server refused every op")

// allRefused explains a row whose every op was refused, naming the
// leader when a cluster follower answered error_not_leader.
func allRefused(r Result) error {
	what := fmt.Sprintf("%s at %d workers, %d ops", r.Target.Name, r.Workers, r.Errors)
	if rest, ok := strings.CutPrefix(r.Refusal, codec.StatusErrorNotLeader.String()); ok {
		if leader := strings.TrimSpace(rest); leader != "" {
			return fmt.Errorf("%w (%s): error_not_leader: %s is a cluster follower; the leader is %s (run against it: --addr %s)",
				ErrAllRefused, what, r.Target.Addr, leader, leader)
		}
		return fmt.Errorf("%w (%s): error_not_leader: %s is a cluster follower and knows no leader (an election under way?)",
			ErrAllRefused, what, r.Target.Addr)
	}
	return fmt.Errorf("%w (%s): the server answered %q", ErrAllRefused, what, r.Refusal)
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
	Refusal    string  `json:"first_refusal,omitempty"`
	ElapsedS   float64 `json:"elapsed_s"`
	Throughput float64 `json:"throughput_ops_s"`
	MeanMs     float64 `json:"mean_ms"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	P999Ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	Ratio      float64 `json:"ratio,omitempty"`
	CPUS       float64 `json:"cpu_s,omitempty"`
	CPUCores   float64 `json:"cpu_cores,omitempty"`
}

// Meta describes a run for --json: which latchd-bench, when, on what
// machine, asked what.
type Meta struct {
	Version   string            `json:"version"`    // latchd-bench's version (commit, Go version)
	Time      time.Time         `json:"time"`       // when the sweep started
	Cores     int               `json:"cores"`      // logical CPUs of the machine running the bench
	GoMaxProc int               `json:"gomaxprocs"` // what the bench's Go runtime used
	Mode      Mode              `json:"mode"`       // lock, contended, sem or twophase
	Loop      string            `json:"loop"`       // "closed" or "open"
	Flags     map[string]string `json:"flags"`      // the flags given (an auth token is redacted)
}

// WriteJSON writes rs as one JSON document: {"meta":{...},"results":[...]}.
func WriteJSON(w io.Writer, meta Meta, rs []Result) error {
	rows := make([]jsonRow, len(rs))
	for i, r := range rs {
		rows[i] = jsonRow{
			Target: r.Target.Name, Kind: r.Target.Kind, Addr: r.Target.Addr,
			Mode: r.Mode, Workers: r.Workers, Rounds: r.Rounds,
			DurationS: r.Duration.Seconds(), Rate: r.Rate,
			Ops: r.Ops, Errors: r.Errors, Refusal: r.Refusal, ElapsedS: r.Elapsed.Seconds(),
			Throughput: r.Throughput, MeanMs: ms(r.Mean), P50Ms: ms(r.P50),
			P99Ms: ms(r.P99), P999Ms: ms(r.P999), MaxMs: ms(r.Max), Ratio: r.Ratio,
			CPUS: r.CPU.Seconds(), CPUCores: r.cores(),
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Meta    Meta      `json:"meta"`
		Results []jsonRow `json:"results"`
	}{meta, rows})
}
