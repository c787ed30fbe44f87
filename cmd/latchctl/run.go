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
	"strings"
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

// held is one lock, sem or elect run: what to hold, and the command to
// run while holding it.
type held struct {
	sub, key                string   // key: the keys joined by spaces
	keys                    []string // lock and sem: 1 to client.MaxKeys
	cmd                     []string
	timeout, ttl, killAfter time.Duration // the flags; timeout -1: not given
	lockDelay               time.Duration // --lock-delay: 0 the server's, client.NoLockDelay none
	limit                   int
	shared, exclusive       bool // lock: a read-write key's read or write hold
	c                       *common
	opts                    []client.Option
	stderr                  io.Writer
}

func runHeld(sub string, fs *flag.FlagSet, c *common, args []string, stderr io.Writer) int {
	r, err := parseHeld(sub, fs, c, args, stderr)
	if err != nil {
		return report(err, stderr)
	}
	// Until CMD starts, a signal abandons the wait (the connection closes
	// and the server withdraws it).
	w := watchSignals()
	defer w.stop()
	h, release, code := r.take(w)
	if h == nil {
		return code
	}
	// From here on, signals go to CMD; one that arrived as the wait ended
	// is passed on as soon as CMD starts.
	status := supervise(h, r.key, r.cmd, r.killAfter, w.sigs, w.got(), stderr)
	return r.release(release, status)
}

// parseHeld reads the flags and arguments of lock, sem or elect.
func parseHeld(sub string, fs *flag.FlagSet, c *common, args []string, stderr io.Writer) (*held, error) {
	r := &held{sub: sub, c: c, stderr: stderr, timeout: -1, killAfter: 10 * time.Second}
	if sub != "elect" {
		fs.Var((*optSeconds)(&r.timeout), "timeout", "how long to wait for the key (0: try once; default: wait as long as it takes)")
	}
	if sub == "sem" {
		fs.IntVar(&r.limit, "limit", 0, "the semaphore's limit: how many may hold it at once (required)")
	}
	if sub == "lock" {
		fs.BoolVar(&r.shared, "shared", false, "take a read-write key's shared (read) hold, with other readers")
		fs.BoolVar(&r.exclusive, "exclusive", false, "take a read-write key's exclusive (write) hold")
	}
	if sub != "elect" {
		fs.Func("lock-delay", "if the lease is lost (not released), the server grants the key again only this long after (a duration such as 15s, or none; default: the server's --lock-delay)", r.parseLockDelay)
	}
	fs.Var((*seconds)(&r.ttl), "ttl", "lease length, renewed while CMD runs (default: the server's, 33 s unless configured)")
	fs.Var((*seconds)(&r.killAfter), "kill-after", "when the lease is lost: time between CMD's SIGTERM and SIGKILL")
	pos, cmd, err := parse(fs, args)
	if err == nil {
		err = checkHeld(sub, pos, cmd, r.limit)
	}
	if err == nil && r.shared && r.exclusive {
		err = usagef("lock takes --shared or --exclusive, not both")
	}
	if err == nil && (r.shared || r.exclusive) && len(pos) > 1 {
		err = usagef("--shared and --exclusive take one KEY")
	}
	if err != nil {
		return nil, err
	}
	if r.opts, err = c.options(); err != nil {
		return nil, usagef("%v", err)
	}
	r.key, r.keys, r.cmd = strings.Join(pos, " "), pos, cmd
	return r, nil
}

// parseLockDelay reads --lock-delay: a duration > 0, or none.
func (r *held) parseLockDelay(s string) error {
	if s == "none" || s == "0" {
		r.lockDelay = client.NoLockDelay
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want a duration >= 0 such as 15s, or none")
	}
	r.lockDelay = d
	if d == 0 {
		r.lockDelay = client.NoLockDelay
	}
	return nil
}

// ttlSeconds is --ttl in whole seconds, rounded up (0: the server's).
func (r *held) ttlSeconds() int { return int((r.ttl + time.Second - 1) / time.Second) }

// take acquires the lock or semaphore, or wins the election. It returns
// what is held and how to give it up, or a nil holder and the exit status.
func (r *held) take(w *signalWatch) (holder, func(context.Context) error, int) {
	if r.sub == "elect" {
		e := &client.Election{Name: r.key, LeaseTTL: r.ttlSeconds(), Options: r.opts}
		setTarget(r.c, &e.Servers, &e.Cluster)
		if err := e.Campaign(w.ctx); err != nil {
			return nil, nil, acquireFailed(err, w.got(), r.key, r.stderr)
		}
		return e, e.Resign, 0
	}
	var (
		h       holder
		release func(context.Context) error
		acquire func(context.Context) (bool, error)
	)
	switch {
	case len(r.keys) > 1:
		h, release, acquire = r.many()
	case r.shared || r.exclusive:
		h, release, acquire = r.rwLock()
	case r.sub == "lock":
		l := &client.Lock{Key: r.key, LeaseTTL: r.ttlSeconds(), Options: r.opts, AcquireTimeout: waitFor(r.timeout), LockDelay: r.lockDelay}
		setTarget(r.c, &l.Servers, &l.Cluster)
		h, release, acquire = l, l.Release, l.Acquire
	default:
		s := &client.Semaphore{Key: r.key, Limit: r.limit, LeaseTTL: r.ttlSeconds(), Options: r.opts, AcquireTimeout: waitFor(r.timeout), LockDelay: r.lockDelay}
		setTarget(r.c, &s.Servers, &s.Cluster)
		h, release, acquire = s, s.Release, s.Acquire
	}
	for {
		ok, err := acquire(w.ctx)
		switch {
		case err != nil:
			return nil, nil, acquireFailed(err, w.got(), r.key, r.stderr)
		case ok:
			return h, release, 0
		case r.timeout >= 0:
			_ = w.got() // stop the watcher
			fmt.Fprintf(r.stderr, "latchctl: timed out after %v waiting for %s\n", r.timeout, r.key)
			return nil, nil, exitTimeout
		}
		// No --timeout: wait again.
	}
}

// rwLock is take's read-write lock: a read hold with --shared, the write
// hold with --exclusive.
func (r *held) rwLock() (holder, func(context.Context) error, func(context.Context) (bool, error)) {
	l := &client.RWLock{Key: r.key, LeaseTTL: r.ttlSeconds(), Options: r.opts, AcquireTimeout: waitFor(r.timeout)}
	setTarget(r.c, &l.Servers, &l.Cluster)
	if r.shared {
		return l, l.Release, l.RLock
	}
	return l, l.Release, l.Lock
}

// release gives up what CMD ran under and returns the exit status: CMD's,
// or exitLost when the lease turns out lost at the release.
func (r *held) release(release func(context.Context) error, status int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := release(ctx)
	switch {
	case status == exitLost:
	case errors.Is(err, client.ErrLost):
		// Lost after CMD had finished, but while it may still have been
		// writing: say so, as for a loss while it ran.
		fmt.Fprintf(r.stderr, "latchctl: the lease on %s was lost: %v\n", r.key, err)
		return exitLost
	case err != nil:
		fmt.Fprintf(r.stderr, "latchctl: release %s: %v (the lease ends with its TTL)\n", r.key, err)
	}
	return status
}

// signalWatch abandons the wait on the first forwarded signal: it cancels
// ctx and keeps the signal for got.
type signalWatch struct {
	sigs    chan os.Signal
	ctx     context.Context
	cancel  context.CancelFunc
	sig     os.Signal // written before watched closes
	watched chan struct{}
}

func watchSignals() *signalWatch {
	w := &signalWatch{sigs: make(chan os.Signal, 8), watched: make(chan struct{})}
	signal.Notify(w.sigs, forwarded...)
	w.ctx, w.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(w.watched)
		select {
		case w.sig = <-w.sigs:
			w.cancel()
		case <-w.ctx.Done():
		}
	}()
	return w
}

// got stops the watcher and returns the signal that ended the wait, if
// any; the watcher has stopped when it returns.
func (w *signalWatch) got() os.Signal {
	w.cancel()
	<-w.watched
	return w.sig
}

func (w *signalWatch) stop() {
	signal.Stop(w.sigs)
	w.cancel()
}

func checkHeld(sub string, pos, cmd []string, limit int) error {
	what := "KEY"
	if sub == "elect" {
		what = "NAME"
	}
	switch {
	case sub != "elect" && (len(pos) < 1 || len(pos) > client.MaxKeys):
		return usagef("%s needs 1 to %d KEYs before --, got %q", sub, client.MaxKeys, pos)
	case sub == "elect" && len(pos) != 1:
		return usagef("%s needs exactly one %s before --, got %q", sub, what, pos)
	case len(cmd) == 0:
		return usagef("%s needs a command after --: latchctl %s %s -- CMD [ARGS...]", sub, sub, what)
	case sub == "sem" && limit < 1:
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
		"LATCHD_FENCE="+fenceEnv(h))
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
