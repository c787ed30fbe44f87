package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/latchd/latchd/internal/buildinfo"
)

// Options is what the table command of latchd-bench was asked to do.
type Options struct {
	Config Config
	// JSON prints the rows as JSON instead of a table.
	JSON bool
	// Plot, when set, is an .svg or .png file to draw.
	Plot string
	// NoProgress hides the progress bar even on a terminal.
	NoProgress bool
	// Flags are the flags given, by name, for --json's metadata; an auth
	// token is redacted.
	Flags map[string]string
}

// targetList is a repeatable --compare flag.
type targetList []Target

func (l *targetList) String() string {
	var s []string
	for _, t := range *l {
		s = append(s, t.Name)
	}
	return strings.Join(s, ",")
}

func (l *targetList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		t, err := ParseTarget(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		*l = append(*l, t)
	}
	return nil
}

// workerList is the --workers flag.
type workerList []int

func (l *workerList) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *workerList) Set(v string) error {
	w, err := ParseWorkers(v)
	if err != nil {
		return err
	}
	*l = w
	return nil
}

// ParseArgs parses the flags of the table command into Options, checked
// with Config.Validate. Usage errors are written to usage.
func ParseArgs(args []string, usage io.Writer) (Options, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("latchd-bench", flag.ContinueOnError)
	fs.SetOutput(usage)
	addr := fs.String("addr", cfg.Targets[0].Addr, "TCP address of the server (--transport tcp)")
	httpAddr := fs.String("http-addr", "127.0.0.1:6389", "REST API address (--transport http)")
	transport := fs.String("transport", "tcp", "tcp (three-line protocol), http (REST API) or mux (tagged mode over --mux connections, default 2)")
	name := fs.String("name", "latchd", "label of the server's rows")
	fs.Var((*workerList)(&cfg.Workers), "workers", "comma-separated worker counts, one row each")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "ops (acquire + release) per worker")
	fs.DurationVar(&cfg.Duration, "duration", 0, "run each row this long instead of --rounds")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: total ops/s per row, latency from the scheduled start (0 = closed loop)")
	fs.StringVar((*string)(&cfg.Mode), "mode", string(cfg.Mode), "lock (key per worker), contended (one key), sem (--limit slots on one key), twophase (enqueue + wait on one key), rw (read or write holds of one read-write key)")
	fs.IntVar(&cfg.Limit, "limit", cfg.Limit, "semaphore slots for --mode sem")
	fs.Float64Var(&cfg.ReadRatio, "read-ratio", cfg.ReadRatio, "share of reads (0 to 1) for --mode rw; the rest are writes")
	timeout := fs.Int("timeout", int(seconds(cfg.AcquireTimeout)), "acquire timeout sent to the server, seconds")
	ttl := fs.Int("ttl", 0, "lease TTL, seconds (0 = server default)")
	fs.StringVar(&cfg.KeyPrefix, "key-prefix", cfg.KeyPrefix, "key prefix")
	fs.StringVar(&cfg.AuthToken, "auth", "", "auth token for TCP connections")
	fs.BoolVar(&cfg.Pipeline, "pipeline", false, "TCP lock/contended/sem: send each release with the next acquire in one write")
	fs.IntVar(&cfg.Mux, "mux", 0, "also run the server's rows in tagged mode: the workers share N connections (0 = no)")
	var compare targetList
	fs.Var(&compare, "compare", "also run [name=]tcp://, http://, redis:// or etcd://host:port (repeatable)")
	cpu := cpuList{}
	fs.Var(cpu, "cpu", "NAME=PID,PID,...: measure, per row of target NAME, the CPU of those processes and of latchd-bench (repeatable; Linux)")
	var o Options
	fs.BoolVar(&o.JSON, "json", false, "print JSON instead of a table")
	fs.StringVar(&o.Plot, "plot", "", "draw throughput and p99 against workers into FILE.svg or FILE.png")
	fs.BoolVar(&o.NoProgress, "no-progress", false, "never draw the progress bar")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Flags of the table command:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Options{}, err
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	o.Flags = setFlags(fs)
	if cfg.Rounds < 0 || cfg.Duration < 0 {
		return Options{}, errors.New("bench: --rounds and --duration must be >= 0")
	}
	if *timeout < 0 || *ttl < 0 {
		return Options{}, errors.New("bench: --timeout and --ttl must be >= 0")
	}
	targets, err := serverTargets(*transport, *name, *addr, *httpAddr, &cfg.Mux)
	if err != nil {
		return Options{}, err
	}
	cfg.Targets = append(targets, compare...)
	if err := checkPIDs(cfg.Targets, cpu); err != nil {
		return Options{}, err
	}
	if len(cpu) > 0 {
		cfg.PIDs = cpu
	}
	cfg.AcquireTimeout = time.Duration(*timeout) * time.Second
	cfg.LeaseTTL = time.Duration(*ttl) * time.Second
	if err := cfg.Validate(); err != nil {
		return Options{}, err
	}
	o.Config = cfg
	return o, nil
}

// setFlags records the flags set on the command line, the auth token
// redacted, for the JSON output.
func setFlags(fs *flag.FlagSet) map[string]string {
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		v := f.Value.String()
		if f.Name == "auth" {
			v = "(redacted)"
		}
		set[f.Name] = v
	})
	return set
}

// serverTargets returns the rows of the server under test for --transport
// (and --mux, defaulting it to 2 connections for the mux transport).
func serverTargets(transport, name, addr, httpAddr string, mux *int) ([]Target, error) {
	var ts []Target
	switch transport {
	case "tcp":
		ts = []Target{{Name: name, Kind: KindTCP, Addr: addr}}
	case "http":
		ts = []Target{{Name: name, Kind: KindHTTP, Addr: httpAddr}}
	case "mux":
		ts = []Target{{Name: name, Kind: KindMux, Addr: addr}}
		*mux = cmp.Or(*mux, 2)
	default:
		return nil, fmt.Errorf("bench: --transport %q: want tcp, http or mux", transport)
	}
	if *mux > 0 && transport != "mux" {
		if transport == "http" {
			return nil, errors.New("bench: --mux needs --transport tcp or mux")
		}
		ts = append(ts, Target{Name: fmt.Sprintf("%s-mux%d", name, *mux), Kind: KindMux, Addr: addr})
	}
	return ts, nil
}

// Main is latchd-bench: the table command, or a subcommand (ceiling,
// selfcheck, freeport, wait, leader, disk). It returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sub, rest := "", args
	if len(args) > 0 {
		sub, rest = args[0], args[1:]
	}
	var err error
	switch sub {
	case "ceiling":
		err = ceilingMain(ctx, rest, stdout, stderr)
	case "selfcheck":
		err = selfCheckMain(ctx, rest, stdout, stderr)
	case "freeport":
		err = freePortMain(stdout)
	case "wait":
		err = waitMain(ctx, rest, stderr)
	case "leader":
		err = leaderMain(ctx, rest, stdout, stderr)
	case "disk":
		err = diskMain(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText+"\n")
		_, _ = ParseArgs([]string{"-h"}, stdout) // prints the flags and returns flag.ErrHelp
		return 0
	default:
		err = tableMain(ctx, args, stdout, stderr)
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintln(stderr, "latchd-bench:", err)
	return 1
}

// errUsage marks a flag error (already printed by the flag package).
var errUsage = errors.New("usage")

const usageText = `latchd-bench drives a lock server and prints throughput and latency tables.

  latchd-bench [flags]                 the table; its flags are listed below
  latchd-bench ceiling --port P        a no-op responder: the transport's limit
  latchd-bench selfcheck [--addr A]    plain client vs harness, side by side
  latchd-bench freeport                print a free loopback TCP port
  latchd-bench leader ADDR...          print the address of the cluster member that leads
  latchd-bench wait ADDR...            wait until every ADDR accepts connections
  latchd-bench disk [--dir D] [--parallel N] [--prealloc]  time 4 KiB write+fdatasync: the disk's floor
`

func tableMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := ParseArgs(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) || strings.HasPrefix(err.Error(), "bench:") {
			return err // help, or a check the flag package did not print
		}
		return errUsage
	}
	if err := preflight(ctx, o); err != nil {
		return err
	}
	meta := Meta{
		Version: buildinfo.Get().String(), Time: time.Now().UTC(), Cores: runtime.NumCPU(),
		GoMaxProc: runtime.GOMAXPROCS(0), Mode: o.Config.Mode, Loop: "closed", Flags: o.Flags,
	}
	if o.Config.Rate > 0 {
		meta.Loop = "open"
	}
	var rs []Result
	if !o.NoProgress && IsTerminal(stderr) {
		bar := StartProgress(stderr, o.Config)
		rs, err = Sweep(ctx, o.Config, bar.Counter())
		bar.Stop()
	} else {
		rs, err = Sweep(ctx, o.Config, nil)
	}
	if len(rs) > 0 {
		if o.JSON {
			if werr := WriteJSON(stdout, meta, rs); werr != nil {
				return werr
			}
		} else {
			opt := TableOptions{Compare: len(o.Config.Targets) > 1,
				Errors: slices.ContainsFunc(rs, func(r Result) bool { return r.Errors > 0 }),
				CPU:    slices.ContainsFunc(rs, func(r Result) bool { return r.CPU > 0 })}
			if werr := WriteTable(stdout, rs, opt); werr != nil {
				return werr
			}
			if opt.Compare {
				fmt.Fprintf(stdout, "\nRatio: %s throughput divided by the row's, at the same worker count.\n", o.Config.Targets[0].Name)
			}
		}
		if o.Plot != "" {
			if perr := WritePlotFile(o.Plot, rs); perr != nil {
				return perr
			}
		}
	}
	return err
}

// preflight checks, before the sweep starts, what would otherwise fail
// only after it: the plot file can be written, and every target (the
// --compare ones included) accepts connections.
func preflight(ctx context.Context, o Options) error {
	if o.Plot != "" {
		if err := checkPlotPath(o.Plot); err != nil {
			return err
		}
	}
	for i, t := range o.Config.Targets {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		var nd net.Dialer
		c, err := nd.DialContext(dctx, "tcp", t.Addr)
		cancel()
		if err != nil {
			what := "target"
			if i > 0 {
				what = "--compare target"
			}
			return fmt.Errorf("bench: %s %s (%s): %w", what, t.Name, t.Addr, err)
		}
		_ = c.Close() // a probe: nothing was sent
	}
	return nil
}

// checkPlotPath checks that path names an .svg or .png file that can be
// created, without leaving anything behind.
func checkPlotPath(path string) error {
	if _, err := plotFormat(path); err != nil {
		return err
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("bench: --plot %q is a directory", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".latchd-bench-plot-*")
	if err != nil {
		return fmt.Errorf("bench: --plot %q: cannot write there: %w", path, err)
	}
	_ = f.Close()              // empty probe
	return os.Remove(f.Name()) // leave nothing behind
}

func ceilingMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("latchd-bench ceiling", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host := fs.String("host", "127.0.0.1", "listen host")
	port := fs.Int("port", 0, "listen port (0 = a free port)")
	loops := fs.Int("loops", 0, "gnet event loops (0 = one per core)")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	c, err := StartCeiling(CeilingConfig{Addr: net.JoinHostPort(*host, strconv.Itoa(*port)), EventLoops: *loops})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "ceiling listening on", c.Addr())
	<-ctx.Done()
	return c.Close()
}

func selfCheckMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("latchd-bench selfcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "server to drive (empty = an in-process ceiling)")
	workers := workerList{10, 50, 200}
	fs.Var(&workers, "workers", "comma-separated worker counts")
	rounds := fs.Int("rounds", 2000, "ops per worker")
	repeat := fs.Int("repeat", 3, "runs of each client per worker count; the best counts")
	minRatio := fs.Float64("min-ratio", 0.95, "fail when harness/plain falls below this at any worker count")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	target := *addr
	if target == "" {
		c, err := StartCeiling(DefaultCeilingConfig())
		if err != nil {
			return err
		}
		defer c.Close()
		target = c.Addr()
		fmt.Fprintln(stdout, "in-process ceiling on", target)
	}
	rows, err := SelfCheck(ctx, target, workers, *rounds, *repeat)
	if err != nil {
		return err
	}
	if err := WriteSelfCheck(stdout, rows); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Ratio < *minRatio {
			return fmt.Errorf("self-check failed: harness reached %.2fx of the plain client at %d workers (want >= %.2f)", r.Ratio, r.Workers, *minRatio)
		}
	}
	fmt.Fprintf(stdout, "\nself-check passed: harness >= %.2fx of the plain client at every worker count\n", *minRatio)
	return nil
}

func usageErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errUsage
}

// freePortMain prints a loopback TCP port that was free a moment ago.
func freePortMain(stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, port)
	return err
}

// waitMain waits until every address accepts a TCP connection.
func waitMain(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("latchd-bench wait", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	for _, addr := range fs.Args() {
		if err := WaitListening(ctx, addr); err != nil {
			return fmt.Errorf("wait %s: %w", addr, err)
		}
	}
	return nil
}

// leaderMain prints the address of the cluster member that leads: the
// one that answers a try-lock rather than error_not_leader.
func leaderMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("latchd-bench leader", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 15*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "latchd-bench leader: name the members' addresses")
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	for i := 0; ; i++ {
		for _, addr := range fs.Args() {
			if leads(ctx, addr, fmt.Sprint("bench-leader-probe-", i)) {
				fmt.Fprintln(stdout, addr)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("leader: none of %v leads", fs.Args())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// leads sends a try-lock on key to addr and reports whether it was run.
func leads(ctx context.Context, addr, key string) bool {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := fmt.Fprintf(c, "l\n%s\n0 1\n", key); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "ok ") || line == "timeout\n")
}

// WaitListening dials addr until it accepts a connection or ctx ends.
func WaitListening(ctx context.Context, addr string) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var nd net.Dialer
	for {
		c, err := nd.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return err
		case <-t.C:
		}
	}
}
