package soak_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/soak"
)

const ms = time.Millisecond

// g builds a grant on key with limit: request sent at sent, granted at
// recv, proven held until end (end < 0: no proof), with fence f.
func g(key string, limit int, f uint64, sent, recv, end time.Duration) soak.Grant {
	return soak.Grant{Key: key, Limit: limit, Fence: f, Sent: sent, Recv: recv, End: end, Ended: end >= 0}
}

// The checkers must be able to fail: each bad history here is one a broken
// server could produce.
func TestCheckHolders(t *testing.T) {
	tests := []struct {
		name   string
		grants []soak.Grant
		want   int // violations
	}{
		{"hand-off that touches", []soak.Grant{g("k", 1, 1, 0, 1*ms, 5*ms), g("k", 1, 2, 2*ms, 5*ms, 9*ms)}, 0},
		{"two lock holders", []soak.Grant{g("k", 1, 1, 0, 1*ms, 5*ms), g("k", 1, 2, 2*ms, 4*ms, 9*ms)}, 1},
		{"other keys do not count", []soak.Grant{g("a", 1, 1, 0, 1*ms, 5*ms), g("b", 1, 2, 0, 2*ms, 9*ms)}, 0},
		{"unproven interval left out", []soak.Grant{g("k", 1, 1, 0, 1*ms, -1), g("k", 1, 2, 0, 2*ms, 9*ms)}, 0},
		{"semaphore at its limit", []soak.Grant{g("s", 2, 1, 0, 1*ms, 9*ms), g("s", 2, 2, 0, 2*ms, 9*ms)}, 0},
		{"semaphore over its limit", []soak.Grant{g("s", 2, 1, 0, 1*ms, 9*ms), g("s", 2, 2, 0, 2*ms, 9*ms),
			g("s", 2, 3, 0, 3*ms, 4*ms)}, 1},
		{"nested", []soak.Grant{g("k", 1, 1, 0, 1*ms, 9*ms), g("k", 1, 2, 0, 2*ms, 3*ms), g("k", 1, 3, 0, 4*ms, 5*ms)}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, v := soak.CheckHolders(tt.grants)
			if len(v) != tt.want {
				t.Errorf("got %d violations %v, want %d", len(v), v, tt.want)
			}
		})
	}
}

func TestCheckFences(t *testing.T) {
	tests := []struct {
		name   string
		grants []soak.Grant
		want   int
	}{
		{"increasing", []soak.Grant{g("a", 1, 5, 0, 1*ms, -1), g("b", 1, 6, 2*ms, 3*ms, -1)}, 0},
		{"concurrent requests may get either order", []soak.Grant{g("a", 1, 6, 0, 3*ms, -1), g("b", 1, 5, 1*ms, 2*ms, -1)}, 0},
		{"goes back on one key", []soak.Grant{g("k", 1, 6, 0, 1*ms, -1), g("k", 1, 5, 2*ms, 3*ms, -1)}, 1},
		{"goes back across keys", []soak.Grant{g("a", 1, 6, 0, 1*ms, -1), g("b", 1, 5, 2*ms, 3*ms, -1)}, 1},
		{"repeats", []soak.Grant{g("a", 1, 5, 0, 1*ms, -1), g("b", 1, 5, 0, 1*ms, -1)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, v := soak.CheckFences(tt.grants)
			if len(v) != tt.want {
				t.Errorf("got %d violations %v, want %d", len(v), v, tt.want)
			}
		})
	}
}

func TestCheckWaits(t *testing.T) {
	w := func(timeout, sent, recv time.Duration, result string) soak.Wait {
		return soak.Wait{Key: "k", Cmd: "l", Timeout: timeout, Sent: sent, Recv: recv, Result: result}
	}
	tests := []struct {
		name string
		wait soak.Wait
		want int
	}{
		{"granted at once", w(time.Second, 0, 1*ms, "granted"), 0},
		{"timeout on time", w(time.Second, 0, 1010*ms, "timeout"), 0},
		{"timeout late", w(time.Second, 0, 1200*ms, "timeout"), 1},
		{"timeout early", w(time.Second, 0, 900*ms, "timeout"), 1},
		{"try-lock", w(0, 0, 1*ms, "timeout"), 0},
		{"never answered", w(time.Second, 0, 11*time.Second, "lost"), 1},
		{"unexpected answer", w(time.Second, 0, 1*ms, "error"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, v := soak.CheckWaits([]soak.Wait{tt.wait}, 100*ms)
			if len(v) != tt.want {
				t.Errorf("got %d violations %v, want %d", len(v), v, tt.want)
			}
		})
	}
}

func TestReport(t *testing.T) {
	r := soak.NewReport("demo")
	r.Note("load", "10 clients")
	r.Add("fences", "5 grants", "", nil)
	r.Add("holders", "5 grants", "", []soak.Violation{{Check: "holders", Detail: "two"}})
	if got := len(r.Violations()); got != 1 {
		t.Fatalf("Violations() = %d, want 1", got)
	}
	s := r.String()
	for _, want := range []string{"== demo ==", "fences", "TOTAL"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}
