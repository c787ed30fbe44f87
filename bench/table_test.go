package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

func TestFormatCount(t *testing.T) {
	tests := []struct {
		name string
		in   int64
		want string
	}{
		{name: "zero", in: 0, want: "0"},
		{name: "three digits", in: 999, want: "999"},
		{name: "four digits", in: 1000, want: "1,000"},
		{name: "seven digits", in: 1234567, want: "1,234,567"},
		{name: "six digits", in: 500000, want: "500,000"},
		{name: "negative", in: -12345, want: "-12,345"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatCount(tt.in); got != tt.want {
				t.Fatalf("FormatCount(%d) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatUnits(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{name: "rate rounds", got: FormatRate(13439.6), want: "13,440 ops/s"},
		{name: "rate zero", got: FormatRate(0), want: "0 ops/s"},
		{name: "millis sub-ms", got: FormatMillis(74 * time.Microsecond), want: "0.074 ms"},
		{name: "millis large", got: FormatMillis(18554 * time.Microsecond), want: "18.554 ms"},
		{name: "millis rounds", got: FormatMillis(1500 * time.Nanosecond), want: "0.002 ms"},
		{name: "ratio", got: FormatRatio(1.525), want: "1.52x"},
		{name: "ratio unknown", got: FormatRatio(0), want: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %q; want %q", tt.got, tt.want)
			}
		})
	}
}

func TestWriteTable(t *testing.T) {
	r := Result{
		Target: Target{Name: "latchd"}, Workers: 10, Rounds: 1000, Ops: 10000,
		Throughput: 45861, Mean: 217 * time.Microsecond, P50: 215 * time.Microsecond,
		P99: 382 * time.Microsecond, P999: 1200 * time.Microsecond, Ratio: 1,
	}
	cmp := r
	cmp.Target.Name, cmp.Throughput, cmp.Ratio = "redis", 30574, 1.5
	dur := r
	dur.Rounds, dur.Duration = 0, 5*time.Second

	tests := []struct {
		name string
		rs   []Result
		opt  TableOptions
		want string
	}{
		{
			name: "dflockd shape",
			rs:   []Result{r},
			want: "| Workers | Rounds | Ops | Throughput | Mean | p50 | p99 | p99.9 |\n" +
				"|---|---|---|---|---|---|---|---|\n" +
				"| 10 | 1,000 | 10,000 | 45,861 ops/s | 0.217 ms | 0.215 ms | 0.382 ms | 1.200 ms |\n",
		},
		{
			name: "comparison",
			rs:   []Result{r, cmp},
			opt:  TableOptions{Compare: true},
			want: "| Target | Workers | Rounds | Ops | Throughput | Mean | p50 | p99 | p99.9 | Ratio |\n" +
				"|---|---|---|---|---|---|---|---|---|---|\n" +
				"| latchd | 10 | 1,000 | 10,000 | 45,861 ops/s | 0.217 ms | 0.215 ms | 0.382 ms | 1.200 ms | 1.00x |\n" +
				"| redis | 10 | 1,000 | 10,000 | 30,574 ops/s | 0.217 ms | 0.215 ms | 0.382 ms | 1.200 ms | 1.50x |\n",
		},
		{
			name: "duration and errors",
			rs:   []Result{dur},
			opt:  TableOptions{Errors: true},
			want: "| Workers | Rounds | Ops | Throughput | Mean | p50 | p99 | p99.9 | Errors |\n" +
				"|---|---|---|---|---|---|---|---|---|\n" +
				"| 10 | 5s | 10,000 | 45,861 ops/s | 0.217 ms | 0.215 ms | 0.382 ms | 1.200 ms | 0 |\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteTable(&b, tt.rs, tt.opt); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Fatalf("WriteTable =\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	// 1000 latencies of 1..1000 µs: p50 = 500 µs, p99 = 990 µs,
	// p99.9 = 999 µs, mean = 500.5 µs, all within the histogram's 0.1%.
	h := hdrhistogram.New(histMin, histMax, histSigFigs)
	var sum time.Duration
	for v := int64(1); v <= 1000; v++ {
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
		sum += time.Duration(v) * time.Microsecond
	}
	r := Result{Ops: 1000, Elapsed: 500 * time.Millisecond}
	summarize(&r, h, sum)
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{name: "mean", got: r.Mean, want: 500500 * time.Nanosecond},
		{name: "p50", got: r.P50, want: 500 * time.Microsecond},
		{name: "p99", got: r.P99, want: 990 * time.Microsecond},
		{name: "p99.9", got: r.P999, want: 999 * time.Microsecond},
		{name: "max", got: r.Max, want: 1000 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := tt.got - tt.want; d < -tt.want/1000 || d > tt.want/1000 {
				t.Fatalf("%s = %v; want %v within 0.1%%", tt.name, tt.got, tt.want)
			}
		})
	}
	if r.Throughput != 2000 {
		t.Fatalf("Throughput = %v; want 2000", r.Throughput)
	}
}

func TestSetRatios(t *testing.T) {
	rows := []Result{{Throughput: 100}, {Throughput: 50}, {Throughput: 200}, {Throughput: 0}}
	setRatios(rows)
	want := []float64{1, 2, 0.5, 0}
	for i, w := range want {
		if rows[i].Ratio != w {
			t.Errorf("row %d: Ratio = %v; want %v", i, rows[i].Ratio, w)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	rs := []Result{{Target: Target{Name: "latchd", Kind: KindTCP, Addr: "a:1"}, Workers: 2, Rounds: 3, Ops: 6, P99: 1500 * time.Microsecond}}
	if err := WriteJSON(&b, Meta{Mode: ModeLock, Cores: 2}, rs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"target": "latchd"`, `"workers": 2`, `"ops": 6`, `"p99_ms": 1.5`, `"mode": "lock"`, `"cores": 2`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b.String())
		}
	}
}
