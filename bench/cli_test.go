package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/server/servertest"
)

func TestHelpListsFlags(t *testing.T) {
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"-h"}, &out, &out); code != 0 {
		t.Fatalf("-h exited %d", code)
	}
	for _, want := range []string{"ceiling", "-workers", "-compare", "-plot", "-json", "-mode"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h output lacks %s:\n%s", want, out.String())
		}
	}
}

// --plot and --compare are checked before the sweep: no row runs.
func TestPreflight(t *testing.T) {
	c := startCeiling(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close() // nobody listens there now
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "plot format", args: []string{"--plot", filepath.Join(dir, "p.gif")}, want: "want a .svg or .png"},
		{name: "plot directory missing", args: []string{"--plot", filepath.Join(dir, "no", "such", "p.svg")}, want: "cannot write there"},
		{name: "compare unreachable", args: []string{"--compare", "tcp://" + deadAddr}, want: "--compare target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"--addr", c.Addr(), "--workers", "1", "--rounds", "5"}, tt.args...)
			code := Main(context.Background(), args, &out, &errOut)
			if code != 1 || !strings.Contains(errOut.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, errOut.String(), tt.want)
			}
			if out.Len() != 0 {
				t.Fatalf("rows ran before the check failed:\n%s", out.String())
			}
		})
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("the plot check left files behind: %v", entries)
	}
}

// notLeader is a fake cluster follower: it answers every request with
// error_not_leader and the leader's address.
func notLeader(t *testing.T, leader string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for n := 0; ; n++ {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if n%3 == 2 { // a request is three lines
						if _, err := c.Write([]byte("error_not_leader " + leader + "\n")); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A row whose every op was refused stops the sweep and exits non-zero,
// naming the server's answer; a follower's names the leader.
func TestAllRefusedRow(t *testing.T) {
	follower := notLeader(t, "10.1.2.3:6388")
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"--addr", follower, "--workers", "1,2", "--rounds", "5", "--json"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "the leader is 10.1.2.3:6388") {
		t.Fatalf("exit %d, stderr %q; want 1 naming the leader", code, errOut.String())
	}
	var doc struct {
		Results []struct {
			Workers int    `json:"workers"`
			Refusal string `json:"first_refusal"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || len(doc.Results) != 1 || doc.Results[0].Refusal != "error_not_leader 10.1.2.3:6388" {
		t.Fatalf("want the one refused row in the JSON, got %q (%v)", out.String(), err)
	}

	// A real server: every try-lock on a held key times out.
	s := servertest.StartServer(t)
	holder, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Write([]byte("l\nbench-hot\n0 60\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(holder).ReadString('\n'); err != nil || !strings.HasPrefix(line, "ok ") {
		t.Fatalf("holder got %q, %v", line, err)
	}
	cfg := tinyConfig(ModeContended, Target{Name: "latchd", Kind: KindTCP, Addr: s.Addr})
	cfg.KeyPrefix = "bench-hot"
	cfg.AcquireTimeout = 0
	rs, err := Sweep(context.Background(), cfg, nil)
	if !errors.Is(err, ErrAllRefused) || !strings.Contains(err.Error(), `"timeout"`) || len(rs) != 1 {
		t.Fatalf("Sweep = %d rows, %v; want one row and ErrAllRefused naming timeout", len(rs), err)
	}
}

func TestPlotTitleNamesMode(t *testing.T) {
	rs := []Result{{Target: Target{Name: "latchd"}, Mode: ModeSem, Rate: 5000, Workers: 1, Throughput: 10, P99: time.Millisecond}}
	var b bytes.Buffer
	if err := WritePlot(&b, "svg", rs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "mode sem, open loop at 5000 ops/s") {
		t.Fatal("the plot's title does not name the mode and loop")
	}
}

// leader with no address is a usage error that says what is missing.
func TestLeaderWithoutAddresses(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"leader"}, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "name the members' addresses") {
		t.Fatalf("exit %d, stderr %q; want 2 saying what is missing", code, errOut.String())
	}
}
