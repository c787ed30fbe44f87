package main

import (
	"bytes"
	"testing"
	"time"
)

// TestOutputFlags: --write-timeout and the output bounds reach both
// servers' configs, from flags or from LATCHD_* variables.
func TestOutputFlags(t *testing.T) {
	o, err := parseOptions([]string{"--max-stats-kb", "64", "--http-port", "6389"}, env(map[string]string{
		"LATCHD_WRITE_TIMEOUT":      "3",
		"LATCHD_MAX_OUTPUT_MB":      "32",
		"LATCHD_MAX_CONN_OUTPUT_KB": "512",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := o.serverConfig()
	if err != nil || sc.WriteTimeout != 3*time.Second || sc.MaxOutput != 32<<20 || sc.MaxConnOutput != 512<<10 ||
		sc.MaxStatsBytes != 64<<10 {
		t.Errorf("server config: write timeout %v, output %d, per conn %d, stats %d (%v)",
			sc.WriteTimeout, sc.MaxOutput, sc.MaxConnOutput, sc.MaxStatsBytes, err)
	}
	hc, err := o.httpConfig()
	if err != nil || hc.WriteTimeout != 3*time.Second || hc.MaxOutput != 32<<20 || hc.MaxStatsBytes != 64<<10 {
		t.Errorf("http config: write timeout %v, output %d, stats %d (%v)", hc.WriteTimeout, hc.MaxOutput, hc.MaxStatsBytes, err)
	}
	// 0 turns the write timeout off on both.
	o, err = parseOptions([]string{"--write-timeout", "0"}, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if sc, err := o.serverConfig(); err != nil || sc.WriteTimeout != 0 {
		t.Errorf("--write-timeout 0: server %v, %v", sc.WriteTimeout, err)
	}
	if hc, err := o.httpConfig(); err != nil || hc.WriteTimeout != 0 {
		t.Errorf("--write-timeout 0: http %v, %v", hc.WriteTimeout, err)
	}
	// Out of range: refused at start.
	var out, errb bytes.Buffer
	if code := run([]string{"--max-stats-kb", "4096"}, env(nil), &out, &errb); code != 2 {
		t.Errorf("--max-stats-kb above half the per-connection cap: exit %d (%q), want 2", code, errb.String())
	}
}
