package fencefile_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/fencefile"
)

// Tests that need a second process re-run this test binary with
// childMode set; the child's half of the test runs and reports on stdout.
const (
	childMode = "FENCEFILE_TEST_CHILD"
	childPath = "FENCEFILE_TEST_PATH"
)

// childCmd returns a command running test in a child with mode and path.
func childCmd(test, mode, path string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	// Under -race a process sleeps a second at exit unless told not to.
	cmd.Env = append(os.Environ(), childMode+"="+mode, childPath+"="+path, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	cmd.Stderr = os.Stderr
	return cmd
}

func TestLockedInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.state")
	j := openT(t, path, fencefile.WithRange(10))
	// flock belongs to the open file description, so a second Open in the
	// same process conflicts on Linux and the BSDs. The third attempt
	// checks that closing the failed attempt's descriptor left the
	// first lock in place.
	for i := range 2 {
		if j2, err := fencefile.Open(path); !errors.Is(err, fencefile.ErrLocked) || !strings.Contains(err.Error(), path) {
			if j2 != nil {
				_ = j2.Close()
			}
			t.Fatalf("Open #%d of a held journal = %v, want ErrLocked naming %s", i+2, err, path)
		}
	}
	limit := j.Limit()
	closeT(t, j)
	j = openT(t, path, fencefile.WithRange(10))
	if j.Seed() != limit {
		t.Fatalf("Open after Close: Seed %d, want %d", j.Seed(), limit)
	}
}

func TestLockedByAnotherProcess(t *testing.T) {
	if os.Getenv(childMode) == "lock" {
		j, err := fencefile.Open(os.Getenv(childPath))
		switch {
		case errors.Is(err, fencefile.ErrLocked):
			fmt.Println("result: locked")
		case err != nil:
			fmt.Println("result: error:", err)
		default:
			fmt.Println("result: opened")
			_ = j.Close()
		}
		return
	}
	path := filepath.Join(t.TempDir(), "fence.state")
	j := openT(t, path, fencefile.WithRange(10))
	try := func() string {
		out, err := childCmd("TestLockedByAnotherProcess", "lock", path).Output()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if r, ok := strings.CutPrefix(line, "result: "); ok {
				return r
			}
		}
		t.Fatalf("child printed no result:\n%s", out)
		return ""
	}
	if got := try(); got != "locked" {
		t.Fatalf("child Open of a held journal: %s, want locked", got)
	}
	closeT(t, j)
	if got := try(); got != "opened" {
		t.Fatalf("child Open after the parent's Close: %s, want opened", got)
	}
}

// TestKill9 runs a server-like child that issues fences through a real
// engine with a small range and Keep running, kills it with SIGKILL
// mid-run, several times, and checks that no fence is ever issued twice:
// each run starts above everything the previous one printed.
func TestKill9(t *testing.T) {
	if os.Getenv(childMode) == "kill9" {
		runFenceChild(t, os.Getenv(childPath))
		return
	}
	path := filepath.Join(t.TempDir(), "fence.state")
	var last uint64 // highest fence printed by any run so far
	for run, killAfter := range []int{300, 2000, 1, 5000} {
		cmd := childCmd("TestKill9", "kill9", path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		n, first := 0, uint64(0)
		for sc.Scan() {
			s, ok := strings.CutPrefix(sc.Text(), "fence ")
			if !ok {
				continue
			}
			f, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("run %d: bad line %q", run, sc.Text())
			}
			if first == 0 {
				first = f
			}
			if f <= last {
				t.Fatalf("run %d: fence %d issued after %d: reused or out of order", run, f, last)
			}
			last = f
			if n++; n == killAfter {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			// Lines already in the pipe when the kill lands were issued
			// too, so reading goes on to EOF.
		}
		werr := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("run %d: child ended with %v after %d fences, want killed by SIGKILL", run, werr, n)
		}
		t.Logf("run %d: fences %d..%d (%d printed)", run, first, last, n)
	}
	j := openT(t, path, fencefile.WithRange(16))
	if j.Seed() < last {
		t.Fatalf("after kill -9: Seed %d, but the child issued %d", j.Seed(), last)
	}
}

// runFenceChild is the child of TestKill9: a real engine on the journal,
// granting and releasing one key until it is killed, printing each fence
// it issued.
func runFenceChild(t *testing.T, path string) {
	j, err := fencefile.Open(path, fencefile.WithRange(16), fencefile.WithInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e := newJournalEngine(t, j)
	stop := make(chan struct{})
	defer close(stop)
	go j.Keep(stop, e.LastFence, e.RaiseFenceLimit, func(err error) { t.Error(err) })
	req := engine.AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1, TTL: time.Minute, Salt: 1}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) { // the parent kills us long before
		out, err := e.Acquire(0, req, nil)
		if err != nil || out.Result != engine.Granted {
			t.Fatal(out, err)
		}
		fmt.Printf("fence %d\n", out.Token.Fence) // os.Stdout is unbuffered: each line is out before the next grant
		if err := e.Release(0, req.Key, out.Token); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("child was not killed")
}
