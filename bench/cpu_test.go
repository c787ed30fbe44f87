package bench

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestCPUFlagNamesTargets(t *testing.T) {
	o, err := ParseArgs([]string{"--name", "cluster3", "--compare", "single=tcp://127.0.0.1:1",
		"--cpu", "cluster3=1,2,3", "--cpu", "single=4"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Config.PIDs; len(got["cluster3"]) != 3 || got["cluster3"][2] != 3 || len(got["single"]) != 1 {
		t.Fatalf("PIDs %v", got)
	}
	for _, bad := range []string{"nobody=1", "cluster3=x", "cluster3=", "=1"} {
		if _, err := ParseArgs([]string{"--name", "cluster3", "--cpu", bad}, &strings.Builder{}); err == nil {
			t.Errorf("--cpu %s: accepted", bad)
		}
	}
}

func TestRunCPUCountsTheProcessesAndItself(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	spin := func() (Result, error) {
		// Burn CPU until this process's own time has moved.
		start, _ := cpuTime(nil)
		for now := start; now-start < 20*time.Millisecond; now, _ = cpuTime(nil) {
		}
		return Result{Ops: 10, Elapsed: time.Second}, nil
	}
	r, err := runCPU(spin, []int{os.Getpid()}) // this process twice: its own and as a named one
	if err != nil {
		t.Fatal(err)
	}
	if r.CPU < 20*time.Millisecond {
		t.Fatalf("CPU %v; want at least the 20ms the row spun", r.CPU)
	}
	if c := formatCPU(r); c[0] == "-" || !strings.HasSuffix(c[1], " ms") {
		t.Fatalf("cells %q", c)
	}
	if r, _ := runCPU(spin, nil); r.CPU != 0 {
		t.Fatalf("no processes named: CPU %v, want none measured", r.CPU)
	}
	if c := formatCPU(Result{}); c[0] != "-" || c[1] != "-" {
		t.Fatalf("unmeasured cells %q", c)
	}
}
