package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDflockdCommandLine: a dflockd v1.10 command line (every flag of its
// but the write and shutdown timeouts, which are latchd's own) parses, with
// dflockd's meaning where latchd has the mechanism and a warning where not.
func TestDflockdCommandLine(t *testing.T) {
	o, err := parseOptions([]string{"--host", "0.0.0.0", "--port", "7000", "--default-lease-ttl", "40",
		"--lease-sweep-interval", "2", "--gc-interval", "9", "--gc-max-idle", "90", "--max-locks", "50",
		"--max-connections", "7", "--max-waiters", "3", "--read-timeout", "11",
		"--auto-release-on-disconnect=false", "--auth-token", "s", "--debug"}, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	got := []any{o.host, o.port, o.defaultLeaseTTL, o.gcMaxIdle, o.maxLocks, o.maxConns, o.maxWaiters,
		o.readTimeout, o.autoRelease, o.authToken, o.logLevel}
	want := []any{"0.0.0.0", 7000, 40, 90, 50, 7, 3, 11, false, "s", "debug"}
	if !slices.Equal(got, want) {
		t.Fatalf("options %v; want %v", got, want)
	}
	var warned []string
	for _, w := range o.warnings {
		warned = append(warned, w.flag)
	}
	if !slices.Equal(warned, []string{"lease-sweep-interval", "gc-interval"}) {
		t.Fatalf("warned about %v; want lease-sweep-interval and gc-interval", warned)
	}

	// Neither flag given: no warning.
	o, err = parseOptions(nil, env(nil), &bytes.Buffer{})
	if err != nil || len(o.warnings) != 0 || o.logLevel != "info" {
		t.Fatalf("defaults: warnings %v, log level %q, err %v", o.warnings, o.logLevel, err)
	}
}

// TestEnvPrecedence: flags > LATCHD_* > dflockd's own variable name >
// DFLOCKD_<FLAG> > default.
func TestEnvPrecedence(t *testing.T) {
	all := map[string]string{
		"LATCHD_READ_TIMEOUT":    "2",
		"DFLOCKD_READ_TIMEOUT_S": "3",
		"DFLOCKD_READ_TIMEOUT":   "4",
	}
	tests := []struct {
		name string
		args []string
		drop []string // variables unset for this case
		want int
	}{
		{name: "flag", args: []string{"--read-timeout", "1"}, want: 1},
		{name: "LATCHD_", want: 2},
		{name: "dflockd name", drop: []string{"LATCHD_READ_TIMEOUT"}, want: 3},
		{name: "DFLOCKD_", drop: []string{"LATCHD_READ_TIMEOUT", "DFLOCKD_READ_TIMEOUT_S"}, want: 4},
		{name: "default", drop: []string{"LATCHD_READ_TIMEOUT", "DFLOCKD_READ_TIMEOUT_S", "DFLOCKD_READ_TIMEOUT"}, want: 23},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := map[string]string{}
			for k, v := range all {
				if !slices.Contains(tt.drop, k) {
					m[k] = v
				}
			}
			o, err := parseOptions(tt.args, env(m), &bytes.Buffer{})
			if err != nil || o.readTimeout != tt.want {
				t.Fatalf("read timeout %d, err %v; want %d", o.readTimeout, err, tt.want)
			}
		})
	}
}

// TestDflockdEnvironment: an operator's dflockd environment, with
// dflockd's variable names and its yes/no booleans, configures latchd.
func TestDflockdEnvironment(t *testing.T) {
	o, err := parseOptions(nil, env(map[string]string{
		"DFLOCKD_HOST":                       "10.0.0.1",
		"DFLOCKD_PORT":                       "7100",
		"DFLOCKD_DEFAULT_LEASE_TTL_S":        "41",
		"DFLOCKD_LEASE_SWEEP_INTERVAL_S":     "2",
		"DFLOCKD_GC_LOOP_SLEEP":              "3",
		"DFLOCKD_GC_MAX_UNUSED_TIME":         "91",
		"DFLOCKD_MAX_LOCKS":                  "51",
		"DFLOCKD_MAX_CONNECTIONS":            "8",
		"DFLOCKD_MAX_WAITERS":                "4",
		"DFLOCKD_READ_TIMEOUT_S":             "12",
		"DFLOCKD_AUTO_RELEASE_ON_DISCONNECT": "no",
		"DFLOCKD_AUTH_TOKEN":                 "tok",
		"DFLOCKD_DEBUG":                      "yes",
		"DFLOCKD_VERSION":                    "1.10.0", // not a flag of dflockd's: ignored
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	got := []any{o.host, o.port, o.defaultLeaseTTL, o.gcMaxIdle, o.maxLocks, o.maxConns, o.maxWaiters,
		o.readTimeout, o.autoRelease, o.authToken, o.logLevel, o.version, len(o.warnings)}
	want := []any{"10.0.0.1", 7100, 41, 91, 51, 8, 4, 12, false, "tok", "debug", false, 2}
	if !slices.Equal(got, want) {
		t.Fatalf("options %v; want %v", got, want)
	}
	if _, err := parseOptions(nil, env(map[string]string{"DFLOCKD_MAX_LOCKS": "many"}), &bytes.Buffer{}); err == nil {
		t.Fatal("DFLOCKD_MAX_LOCKS=many accepted")
	}
}

// TestAuthTokenPrecedence: of --auth-token and --auth-token-file, the one
// from the stronger source wins; from the same source, the inline token.
func TestAuthTokenPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := func(name, tok string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ff, lf, df := file("flag", "from-flag-file"), file("latchd", "from-latchd-file"), file("dflockd", "from-dflockd-file")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "flag token beats flag file", args: []string{"--auth-token", "t", "--auth-token-file", ff}, want: "t"},
		{name: "flag file beats LATCHD_AUTH_TOKEN", args: []string{"--auth-token-file", ff},
			env: map[string]string{"LATCHD_AUTH_TOKEN": "x"}, want: "from-flag-file"},
		{name: "flag token beats DFLOCKD_AUTH_TOKEN", args: []string{"--auth-token", "t"},
			env: map[string]string{"DFLOCKD_AUTH_TOKEN": "x"}, want: "t"},
		{name: "LATCHD_AUTH_TOKEN beats LATCHD_AUTH_TOKEN_FILE",
			env: map[string]string{"LATCHD_AUTH_TOKEN": "l", "LATCHD_AUTH_TOKEN_FILE": lf}, want: "l"},
		{name: "LATCHD_AUTH_TOKEN_FILE beats DFLOCKD_AUTH_TOKEN",
			env: map[string]string{"LATCHD_AUTH_TOKEN_FILE": lf, "DFLOCKD_AUTH_TOKEN": "d"}, want: "from-latchd-file"},
		{name: "DFLOCKD_AUTH_TOKEN beats DFLOCKD_AUTH_TOKEN_FILE",
			env: map[string]string{"DFLOCKD_AUTH_TOKEN": "d", "DFLOCKD_AUTH_TOKEN_FILE": df}, want: "d"},
		{name: "DFLOCKD_AUTH_TOKEN_FILE alone", env: map[string]string{"DFLOCKD_AUTH_TOKEN_FILE": df}, want: "from-dflockd-file"},
		{name: "none", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, env(tt.env), &bytes.Buffer{})
			if err != nil || o.authToken != tt.want {
				t.Fatalf("token %q, err %v; want %q", o.authToken, err, tt.want)
			}
		})
	}
}
