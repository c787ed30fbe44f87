package main

import (
	"bytes"
	"testing"
)

// TestMaxKeysPerOwnerDefault: with default flags one connection or session
// may hold or wait on a quarter of --max-locks (256 of 1,024), so it
// cannot take every key (#11); the share follows --max-locks, an explicit
// value wins, and --max-locks 0 (no cap) leaves owners uncapped too.
func TestMaxKeysPerOwnerDefault(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want int
	}{
		{nil, 256},
		{[]string{"--max-locks", "100"}, 25},
		{[]string{"--max-locks", "2"}, 1},
		{[]string{"--max-locks", "0"}, 0},
		{[]string{"--max-keys-per-owner", "10"}, 10},
		{[]string{"--max-locks", "0", "--max-keys-per-owner", "10"}, 10},
	} {
		o, err := parseOptions(tt.args, func(string) string { return "" }, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := o.engineConfig()
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if c.MaxKeysPerOwner != tt.want {
			t.Errorf("%v: max keys per owner %d, want %d", tt.args, c.MaxKeysPerOwner, tt.want)
		}
	}
	o, err := parseOptions([]string{"--max-keys-per-owner", "-1"}, func(string) string { return "" }, &bytes.Buffer{})
	if err == nil {
		if _, err = o.engineConfig(); err == nil {
			t.Fatal("--max-keys-per-owner -1 accepted")
		}
	}
}
