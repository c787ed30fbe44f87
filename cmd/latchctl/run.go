package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/latchd/latchd/client"
)

// forwarded are the signals latchctl passes on to CMD while it runs.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// forever is how long one acquire waits when --timeout is not given; the
// acquire is then re-issued until it succeeds.
const forever = time.Hour

// holder is what lock, sem and elect hold while CMD runs: a client.Lock,
// a client.Semaphore or a client.Election.
type holder interface {
	Lost() <-chan struct{}
	Err() error
	Token() string
	Fence() uint64
}

// heldFlags are the flags of lock, sem and elect.
type heldFlags struct {
	timeout, ttl, killAfter time.Duration
	limit                   int
}

func runHeld(sub string, fs *flag.FlagSet, c *common, args []string, stderr io.Writer) int {
	hf := heldFlags{timeout: -1, killAfter: 10 * time.Second}
	if sub != "elect" {
		fs.Var((*optSeconds)(&hf.timeout), "timeout", "how long to wait for the key (0: try once; default: wait as long as it takes)")
	}
	if sub == "sem" {
		fs.IntVar(&hf.limit, "limit", 0, "the semaphore's limit: how many may hold it at once (required)")
	}
	fs.Var((*seconds)(&hf.ttl), "ttl", "lease length, renewed while CMD runs (default: the server's, 33 s unless configured)")
	fs.Var((*seconds)(&hf.killAfter), "kill-after", "when the lease is lost: time between CMD's SIGTERM and SIGKILL")
	pos, cmd, err := parse(fs, args)
	if err == nil {
		err = checkHeld(sub, pos, cmd, hf)
	}
	if err != nil {
		return report(err, stderr)
	}
	opts, err := c.options()
	if err != nil {
		return report(usagef("%v", err), stderr)
	}
	key := pos[0]
	ttl := int((hf.ttl + time.Second - 1) / time.Second)

	// Until CMD starts, a signal abandons the wait (the connection closes
	// and the server withdraws it).
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gotCh, watched := make(chan os.Signal, 1), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigs:
			gotCh <- s
			cancel()
		case <-ctx.Done():
		}
	}()
	// got returns the signal that ended the wait, if any; the watcher has
	// stopped when it returns.
	got := func() os.Signal {
		cancel()
		<-watched
		select {
		case s := <-gotCh:
			return s
		default:
			return nil
		}
	}

	var (
		h       holder
		release func(context.Context) error
		timeout = hf.timeout
	)
	switch sub {
	case "lock", "sem":
		var acquire func(context.Context) (bool, error)
		if sub == "lock" {
			l := &client.Lock{Key: key, LeaseTTL: ttl, Options: opts}
			setTarget(c, &l.Servers, &l.Cluster)
			h, release = l, l.Release
			acquire = func(ctx context.Context) (bool, error) { return l.Acquire(ctx) }
			l.AcquireTimeout = waitFor(timeout)
		} else {
			s := &client.Semaphore{Key: key, Limit: hf.limit, LeaseTTL: ttl, Options: opts}
			setTarget(c, &s.Servers, &s.Cluster)
			h, release = s, s.Release
			acquire = func(ctx context.Context) (bool, error) { return s.Acquire(ctx) }
			s.AcquireTimeout = waitFor(timeout)
		}
		for {
			ok, err := acquire(ctx)
			if err != nil {
				return acquireFailed(err, got(), key, stderr)
			}
			if ok {
				break
			}
			if timeout >= 0 {
				_ = got() // stop the watcher
				fmt.Fprintf(stderr, "latchctl: timed out after %v waiting for %s\n", timeout, key)
				return exitTimeout
			}
		}
	case "elect":
		e := &client.Election{Name: key, LeaseTTL: ttl, Options: opts}
		setTarget(c, &e.Servers, &e.Cluster)
		h, release = e, e.Resign
		if err := e.Campaign(ctx); err != nil {
			return acquireFailed(err, got(), key, stderr)
		}
	}
	// From here on, signals go to CMD; one that arrived as the wait ended
	// is passed on as soon as CMD starts.
	status := supervise(h, key, cmd, hf.killAfter, sigs, got(), stderr)

	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	err = release(rctx)
	switch {
	case status == exitLost:
	case errors.Is(err, client.ErrLost):
		// Lost after CMD had finished, but while it may still have been
		// writing: say so, as for a loss while it ran.
		fmt.Fprintf(stderr, "latchctl: the lease on %s was lost: %v\n", key, err)
		return exitLost
	case err != nil:
		fmt.Fprintf(stderr, "latchctl: release %s: %v (the lease ends with its TTL)\n", key, err)
	}
	return status
}

func checkHeld(sub string, pos, cmd []string, hf heldFlags) error {
	what := "KEY"
	if sub == "elect" {
		what = "NAME"
	}
	switch {
	case len(pos) != 1:
		return usagef("%s needs exactly one %s before --, got %q", sub, what, pos)
	case len(cmd) == 0:
		return usagef("%s needs a command after --: latchctl %s %s -- CMD [ARGS...]", sub, sub, what)
	case sub == "sem" && hf.limit < 1:
		return usagef("sem needs --limit N (N >= 1)")
	}
	return nil
}

// setTarget points a Lock, Semaphore or Election at --servers (a cluster)
// or --addr.
func setTarget(c *common, servers, cluster *[]string) {
	if seeds := c.cluster(); len(seeds) > 0 {
		*cluster = seeds
		return
	}
	*servers = []string{c.addr}
}

// waitFor is the AcquireTimeout for --timeout: as given, or forever's
// repeated waits when not given.
func waitFor(timeout time.Duration) time.Duration {
	if timeout < 0 {
		return forever
	}
	return timeout
}

func acquireFailed(err error, sig os.Signal, key string, stderr io.Writer) int {
	if sig != nil {
		fmt.Fprintf(stderr, "latchctl: %v while waiting for %s\n", sig, key)
		return signalStatus(sig)
	}
	fmt.Fprintf(stderr, "latchctl: acquire %s: %v\n", key, err)
	return exitError
}

// supervise runs cmd while h is held: it forwards signals, and stops cmd
// when the lease is lost. It returns cmd's exit status, or exitLost.
func supervise(h holder, key string, argv []string, killAfter time.Duration, sigs <-chan os.Signal, pending os.Signal, stderr io.Writer) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"LATCHD_KEY="+key,
		"LATCHD_TOKEN="+h.Token(),
		fmt.Sprintf("LATCHD_FENCE=%016x", h.Fence()))
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "latchctl: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitNoExec
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }() // the status is read from ProcessState
	// CMD leads its own process group, so a signal reaches what it started
	// too (a shell's children, a pipeline).
	group := -cmd.Process.Pid
	signalGroup := func(s os.Signal) { _ = syscall.Kill(group, s.(syscall.Signal)) } // it may have exited: nothing to do then
	if pending != nil {
		signalGroup(pending)
	}
	var (
		lost     = h.Lost()
		kill     <-chan time.Time
		lostOnce bool
	)
	for {
		select {
		case s := <-sigs:
			signalGroup(s)
		case <-lost:
			lost, lostOnce = nil, true
			fmt.Fprintf(stderr, "latchctl: lost the lease on %s: %v; stopping the command (SIGTERM, SIGKILL after %v)\n", key, h.Err(), killAfter)
			signalGroup(syscall.SIGTERM)
			t := time.NewTimer(killAfter)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			signalGroup(syscall.SIGKILL)
		case <-done:
			if lostOnce {
				return exitLost
			}
			return exitStatus(cmd.ProcessState)
		}
	}
}

// exitStatus is how a shell reports ps: the exit code, or 128+N after
// signal N.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitError
}

// optSeconds is a seconds flag whose unset value (-1) means "not given".
type optSeconds time.Duration

func (s *optSeconds) String() string {
	if *s < 0 {
		return "none"
	}
	return time.Duration(*s).String()
}

func (s *optSeconds) Set(v string) error { return (*seconds)(s).Set(v) }
