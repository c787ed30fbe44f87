package main

import (
	"bytes"
	"flag"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHelpGroups: --help lists the flags in their sections, in order, each
// flag once, written --flag with its LATCHD_* variable, and exits 0.
func TestHelpGroups(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, env(nil), &out, &errb); code != 0 {
		t.Fatalf("--help: exit %d, want 0", code)
	}
	help := errb.String()
	wantGroups := []string{"Listeners", "Limits", "Leases", "Security", "Cluster", "Backup and restore", "Observability", "Tuning", "dflockd compatibility"}
	var groups []string
	for line := range strings.Lines(help) {
		if m := regexp.MustCompile(`^(\S.*):$`).FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			groups = append(groups, m[1])
		}
	}
	if !slices.Equal(groups, wantGroups) {
		t.Errorf("sections %q, want %q", groups, wantGroups)
	}
	if m := regexp.MustCompile(`(?m)^\s+-[a-z]`).FindString(help); m != "" {
		t.Errorf("a flag written with one dash: %q", m)
	}
	fs := (&options{}).newFlagSet(io.Discard)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		re := regexp.MustCompile(`(?m)^  --` + regexp.QuoteMeta(f.Name) + `( \w+)?  \[([A-Z_]+)\]$`)
		all := re.FindAllStringSubmatch(help, -1)
		switch {
		case len(all) != 1:
			t.Errorf("--%s appears %d times in --help, want once", f.Name, len(all))
		case all[0][2] != envName(f.Name):
			t.Errorf("--%s shows %s, want %s", f.Name, all[0][2], envName(f.Name))
		}
	})
	if n < 50 {
		t.Errorf("only %d flags registered", n)
	}
	if got := strings.Count(help, "\n  --"); got != n {
		t.Errorf("--help lists %d flags, %d are registered", got, n)
	}
	for line := range strings.Lines(help) {
		if len(strings.TrimRight(line, "\n")) > usageWidth && !strings.HasPrefix(line, "  --") {
			t.Errorf("help line over %d columns: %q", usageWidth, line)
		}
	}
}

// TestFlagBoundsCoverEveryNumericFlag: a numeric flag has a range, or is
// listed as taking any value.
func TestFlagBoundsCoverEveryNumericFlag(t *testing.T) {
	fs := (&options{}).newFlagSet(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		switch f.Value.(flag.Getter).Get().(type) {
		case int, float64, time.Duration:
			_, ok := bounds[f.Name]
			if ok == uncheckedFlags[f.Name] {
				t.Errorf("--%s: in bounds %v, in uncheckedFlags %v; want exactly one", f.Name, ok, uncheckedFlags[f.Name])
			}
		}
	})
	for name := range bounds {
		if fs.Lookup(name) == nil {
			t.Errorf("bounds names --%s, which is not a flag", name)
		}
	}
}

// TestFlagErrorsNameTheFlag: every numeric flag out of range, or a pair
// out of step, is refused at start (exit 2) with one line naming the flag,
// not a package's field.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	type flagCase struct {
		name string
		args []string
		env  map[string]string
		want string
	}
	tests := []flagCase{
		{name: "max-locks", args: []string{"--max-locks", "-1"}, want: "--max-locks must be >= 0, got -1"},
		{name: "port", args: []string{"--port", "70000"}, want: "--port must be within 0 and 65535, got 70000"},
		{name: "from the environment", env: map[string]string{"LATCHD_MAX_WAITERS": "-2"},
			want: "--max-waiters must be >= 0, got -2 (from LATCHD_MAX_WAITERS)"},
		{name: "shards", args: []string{"--shards", "3"}, want: "--shards must be a power of two, got 3"},
		{name: "raft-batch-wait", args: []string{"--raft-batch-wait", "1s"}, want: "--raft-batch-wait must be within 0s and 100ms, got 1s"},
		{name: "rate limit", args: []string{"--http-rate-limit-per-ip", "NaN"}, want: "--http-rate-limit-per-ip must be a finite number"},
		{name: "stats above half the connection's output", args: []string{"--max-conn-output-kb", "64", "--max-stats-kb", "33"},
			want: "--max-stats-kb must be at most half of --max-conn-output-kb"},
		{name: "budget below one connection's output", args: []string{"--max-output-mb", "1", "--max-conn-output-kb", "2048", "--max-stats-kb", "4"},
			want: "--max-output-mb (1 MiB) must be 0 or at least --max-conn-output-kb (2048 KiB)"},
	}
	// Each bounded flag just below its minimum and just above its maximum.
	for name, b := range bounds {
		tests = append(tests, flagCase{name: name + " below", args: []string{"--" + name, outside(name, b.min, -1)}, want: "--" + name + " must be "})
		if b.max != noMax {
			tests = append(tests, flagCase{name: name + " above", args: []string{"--" + name, outside(name, b.max, 1)}, want: "--" + name + " must be "})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, env(tt.env), &out, &errb)
			msg := errb.String()
			if code != 2 || strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "latchd: "+tt.want) {
				t.Fatalf("latchd %v: exit %d, stderr %q; want exit 2 and one line starting %q", tt.args, code, msg, "latchd: "+tt.want)
			}
		})
	}
}

// outside returns a value of flag name one step past edge in direction dir.
func outside(name string, edge float64, dir int) string {
	if name == "raft-batch-wait" || name == "orphan-ttl" || name == "lock-delay" {
		return (time.Duration(edge) + time.Duration(dir)*time.Millisecond).String()
	}
	if name == "http-rate-limit-per-ip" {
		return "-0.5"
	}
	return strconv.FormatInt(int64(edge)+int64(dir), 10)
}
