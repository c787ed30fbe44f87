//go:build nemesis

package nemesis

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Run-under-lock: `latchctl lock KEY -- CMD` talks to the leader only
// (--addr), and the nemesis cuts the leader off from its peers while CMD
// runs. latchctl cannot renew, so it must give CMD SIGTERM before the
// lease can end on the majority's new leader; a second latchctl, on the
// majority's nodes, waits for the key, and its CMD must start after the
// first CMD was told to stop. The margin is the time between the two.

// ulTTL is the lease of the run-under-lock commands.
const ulTTL = "3"

// underLockEnv names the file a CMD records its start and SIGTERM in;
// TestMain runs the test binary as that CMD when it is set.
const underLockEnv = "NEMESIS_UNDERLOCK"

func TestMain(m *testing.M) {
	if f := os.Getenv(underLockEnv); f != "" {
		underLockCmd(f)
		return
	}
	os.Exit(m.Run())
}

// underLockCmd is CMD: it writes "start <unix ns>", then "term <unix ns>"
// when SIGTERM comes, and exits; it gives up after a minute.
func underLockCmd(file string) {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		os.Exit(3)
	}
	fmt.Fprintf(f, "start %d\n", time.Now().UnixNano())
	select {
	case <-term:
		fmt.Fprintf(f, "term %d\n", time.Now().UnixNano())
	case <-time.After(time.Minute):
	}
	_ = f.Close()
}

// underLock is one run-under-lock: its commands and what they recorded.
type underLock struct {
	first, second *exec.Cmd
	firstDone     chan struct{}
	dir           string
}

// lockCmd is latchctl lock on the run-under-lock key, against one server
// (--addr) or a cluster's (--servers), its CMD recording in dir/name.
func (c *cluster) lockCmd(dir, name string, servers ...string) *exec.Cmd {
	target := []string{"--addr", servers[0]}
	if len(servers) > 1 {
		target = []string{"--servers", strings.Join(servers, ",")}
	}
	args := append([]string{"netns", "exec", c.topo.client, c.ctl}, target...)
	args = append(args, "lock", "nemesis-underlock", "--ttl", ulTTL, "--kill-after", "5", "--", os.Args[0])
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), underLockEnv+"="+filepath.Join(dir, name))
	log, _ := os.Create(filepath.Join(dir, name+".out"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// stamps reads what a CMD recorded: its start and SIGTERM times (0: none).
func stamps(file string) (start, term int64) {
	b, _ := os.ReadFile(file)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			if f[0] == "start" {
				start = v
			} else {
				term = v
			}
		}
	}
	return start, term
}

// waitStart waits until file holds a start, up to within.
func waitStart(file string, within time.Duration) bool {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if s, _ := stamps(file); s != 0 {
			return true
		}
	}
	return false
}

// runUnderLock starts the first latchctl lock against the leader, waits
// for its CMD, cuts the leader off from its peers and starts the second
// on the other nodes. Heal restores the links, waits for the second CMD
// and checks the two never overlapped.
func runUnderLock(c *cluster, tp *topo, l int) (func() error, int, error) {
	dir, err := os.MkdirTemp(c.dir, "underlock")
	if err != nil {
		return nil, l, err
	}
	u := &underLock{dir: dir, firstDone: make(chan struct{})}
	u.first = c.lockCmd(dir, "first", c.nodes[l].addr())
	if err := u.first.Start(); err != nil {
		return nil, l, err
	}
	go func() { _ = u.first.Wait(); close(u.firstDone) }()
	if !waitStart(filepath.Join(dir, "first"), 10*time.Second) {
		u.stop()
		return nil, l, fmt.Errorf("run-under-lock: the first CMD did not start within 10s")
	}
	heal, _, err := partition(tp, l)
	if err != nil {
		u.stop()
		return nil, l, err
	}
	var others []string
	for j, n := range c.nodes {
		if j != l {
			others = append(others, n.addr())
		}
	}
	u.second = c.lockCmd(dir, "second", others...)
	if err := u.second.Start(); err != nil {
		u.stop()
		return nil, l, errors.Join(err, heal())
	}
	return func() error {
		err := heal()
		started := waitStart(filepath.Join(dir, "second"), serve)
		u.stop()
		c.checkUnderLock(u, started)
		return err
	}, l, nil
}

// stop ends both latchctl runs: SIGTERM (passed on to CMD, which
// exits), then SIGKILL after 5 s.
func (u *underLock) stop() {
	for _, cmd := range []*exec.Cmd{u.second, u.first} {
		if cmd == nil || cmd.Process == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := u.firstDone
		if cmd == u.second {
			done = make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// checkUnderLock records the margin, or the anomaly: the first CMD never
// told to stop, or the second started before the first was.
func (c *cluster) checkUnderLock(u *underLock, started bool) {
	s1, t1 := stamps(filepath.Join(u.dir, "first"))
	s2, _ := stamps(filepath.Join(u.dir, "second"))
	out, _ := os.ReadFile(filepath.Join(u.dir, "first.out"))
	switch {
	case !started:
		c.note("run-under-lock: the second CMD did not start within %v of heal", serve)
	case t1 == 0:
		c.note("run-under-lock: the second CMD started while the first never got SIGTERM (latchctl said %q)", strings.TrimSpace(string(out)))
	case s2 < t1:
		c.note("run-under-lock: the second CMD started %v before the first got SIGTERM", time.Duration(t1-s2))
	default:
		c.mu.Lock()
		c.margins = append(c.margins, time.Duration(s2-t1))
		c.mu.Unlock()
		c.t.Logf("run-under-lock: first CMD ran %v, got SIGTERM %v before the second started (latchctl: %s)",
			time.Duration(t1-s1).Round(time.Millisecond), time.Duration(s2-t1).Round(time.Millisecond), strings.TrimSpace(string(out)))
	}
	if code := u.first.ProcessState.ExitCode(); started && code != 76 {
		c.note("run-under-lock: the first latchctl exited %d, not 76 (lease lost)", code)
	}
}
