package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A row's CPU: with --cpu NAME=PID,... the sweep reads, before and after
// each of NAME's rows, the CPU time (user + system) the server processes
// PID,... and latchd-bench itself have used, and the table shows how many
// cores that kept busy and how much CPU one op took. On a machine whose
// cores the row keeps busy, the CPU, not the disk or the protocol, bounds
// its throughput.

// clockTick is the unit of the times in /proc/PID/stat (USER_HZ, which
// Linux fixes at 100 on every architecture it exports to user space).
const clockTick = 10 * time.Millisecond

// cpuList is the repeatable --cpu flag: NAME=PID,PID,...
type cpuList map[string][]int

func (l cpuList) String() string {
	var s []string
	for name, pids := range l {
		s = append(s, fmt.Sprintf("%s=%v", name, pids))
	}
	return strings.Join(s, " ")
}

func (l cpuList) Set(v string) error {
	name, list, ok := strings.Cut(v, "=")
	if !ok || name == "" || list == "" {
		return fmt.Errorf("want NAME=PID,PID,..., got %q", v)
	}
	for _, f := range strings.Split(list, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || pid <= 0 {
			return fmt.Errorf("pid %q: want a positive integer", f)
		}
		l[name] = append(l[name], pid)
	}
	return nil
}

// checkPIDs checks that --cpu names targets of the sweep.
func checkPIDs(targets []Target, l cpuList) error {
	for name := range l {
		if !slices.ContainsFunc(targets, func(t Target) bool { return t.Name == name }) {
			return fmt.Errorf("bench: --cpu %s: no target of that name", name)
		}
	}
	return nil
}

// cpuTime returns the CPU time used so far by the processes pids and by
// this one.
func cpuTime(pids []int) (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	for _, pid := range pids {
		t, err := procCPU(pid)
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

// procCPU reads the user and system time of process pid from /proc.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of %d: %w", pid, err)
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted here start after its closing parenthesis, at the state.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("bench: cpu of %d: unexpected /proc stat %q", pid, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: cpu of %d: unexpected /proc stat %q", pid, b)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// runCPU is run, with the row's CPU measured when pids names processes.
func runCPU(run func() (Result, error), pids []int) (Result, error) {
	if len(pids) == 0 {
		return run()
	}
	before, err := cpuTime(pids)
	if err != nil {
		return Result{}, err
	}
	r, err := run()
	if after, cerr := cpuTime(pids); cerr == nil {
		r.CPU = after - before
	}
	return r, err
}

// cores is how many cores r's CPU kept busy over the row.
func (r Result) cores() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.CPU) / float64(r.Elapsed)
}

// cpuPerOp is the CPU one of r's ops took.
func (r Result) cpuPerOp() time.Duration {
	if r.Ops <= 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Ops)
}
