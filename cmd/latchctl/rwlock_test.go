package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// Two lock --shared runs hold one key together (each waits for the
// other's mark), while lock --exclusive waits for both to finish.
func TestLockSharedAndExclusive(t *testing.T) {
	t.Parallel()
	s := servertest.StartServer(t)
	dir := t.TempDir()
	mark := func(n string) string { return filepath.Join(dir, n) }
	reader := func(mine, other string) *latchctl {
		script := `touch "$1"; while [ ! -e "$2" ] || [ ! -e "$3" ]; do sleep 0.05; done`
		return start(t, nil, "--addr", s.Addr, "lock", "cfg", "--shared", "--timeout", "20", "--",
			"sh", "-c", script, "sh", mark(mine), mark(other), mark("go"))
	}
	a, b := reader("a", "b"), reader("b", "a")
	for _, n := range []string{"a", "b"} {
		testutil.Eventually(t, 20*time.Second, func() bool { _, err := os.Stat(mark(n)); return err == nil }, "reader "+n+" never ran")
	}
	if code, _, stderr := runCtl(t, nil, 20*time.Second, "--addr", s.Addr, "lock", "cfg", "--exclusive", "--timeout", "1", "--", "true"); code != exitTimeout {
		t.Fatalf("--exclusive over two readers exited %d, want %d: %s", code, exitTimeout, stderr)
	}
	if code, _, _ := runCtl(t, nil, 20*time.Second, "--addr", s.Addr, "lock", "cfg", "--timeout", "0", "--", "true"); code == 0 {
		t.Fatal("a plain lock ran on a read-held key")
	}
	if code, out, stderr := runCtl(t, nil, 20*time.Second, "--addr", s.Addr, "stats"); code != 0 ||
		!strings.Contains(out, "read-write locks in use: 1") || !regexp.MustCompile(`cfg\s+rw/read\s+2\s`).MatchString(out) {
		t.Fatalf("stats exited %d:\n%s%s", code, out, stderr)
	}
	w := start(t, nil, "--addr", s.Addr, "lock", "cfg", "--exclusive", "--timeout", "20", "--", "true")
	if err := os.WriteFile(mark("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*latchctl{a, b, w} {
		if code := r.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("%q exited %d: %s", r.cmd.Args[1:], code, r.stderr.String())
		}
	}
	if code, _, _ := runCtl(t, nil, 20*time.Second, "--addr", s.Addr, "lock", "cfg", "--shared", "--exclusive", "--", "true"); code != 2 {
		t.Fatalf("--shared --exclusive exited %d, want 2", code)
	}
}
