// Command latchctl is latchd's command-line client, built on package
// client: it runs a command while holding a lock, a semaphore slot or an
// election's leadership, shows the server's state (stats, top) and
// health, and changes a cluster's membership and leadership over its
// admin API (member, leader), and backs up the state (snapshot).
// docs/cli.md documents it.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/buildinfo"
)

// Exit statuses of latchctl itself. Otherwise lock, sem and elect exit with
// CMD's status (128+N when a signal N ended it, as shells report it).
const (
	exitError    = 1   // could not talk to the server, bad answer, ...
	exitUsage    = 2   // bad command line
	exitTimeout  = 75  // the acquire timed out (EX_TEMPFAIL: try again later)
	exitLost     = 76  // the lease was lost while CMD ran; CMD was stopped
	exitNoExec   = 126 // CMD was found but could not be started
	exitNotFound = 127 // CMD was not found
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

const usage = `latchctl is the command-line client of latchd.

Usage:
  latchctl [flags] lock KEY [--shared | --exclusive] [--timeout D] [--ttl D] [--kill-after D] [--lock-delay D] -- CMD [ARGS...]
  latchctl [flags] sem KEY --limit N [--timeout D] [--ttl D] [--kill-after D] [--lock-delay D] -- CMD [ARGS...]
  latchctl [flags] elect NAME [--ttl D] [--kill-after D] -- CMD [ARGS...]
  latchctl [flags] observe NAME [--count N]
  latchctl [flags] stats [--json] [--all] [--consistent]
  latchctl [flags] top [--interval D] [--metrics-url URL] [--limit N] [--once]
  latchctl [flags] health [--http URL]
  latchctl [flags] member list [--json] | add ID RAFT_ADDR [--learner] | promote ID | remove ID
  latchctl [flags] leader transfer [ID]
  latchctl [flags] snapshot save FILE | status FILE [--json]
  latchctl version

lock --shared and --exclusive take a read-write key's read hold (with other
readers) or its write hold (alone); plain lock is an ordinary lock.

CMD runs with LATCHD_KEY, LATCHD_TOKEN and LATCHD_FENCE in its environment
while the lease is held and renewed. Durations are seconds ("10") or Go
durations ("1m30s"). Exit status: CMD's own; 75 when the acquire timed out;
76 when the lease was lost (CMD got SIGTERM, then SIGKILL after
--kill-after); 1 on other errors; 2 on a bad command line.

member and leader change a cluster over its admin API: their flags
--http, --admin-token-file (or env LATCHD_ADMIN_TOKEN) and --learner,
--json go after the subcommand (latchctl member -h). Exit status: 0 done,
1 refused or failed (the server's error on stderr), 2 bad command line.

snapshot save writes a backup of the state to FILE over the same admin
API (and flags); snapshot status checks a backup file and prints its header.

Flags (before or after the subcommand):
`

// common are the flags every subcommand takes.
type common struct {
	addr, servers, authToken      string
	tls, tlsInsecure              bool
	tlsCA, tlsServerName, tlsCert string
	tlsKey                        string
	dialTimeout                   time.Duration
}

// fromEnv returns the defaults: the built-in ones and the environment's.
func fromEnv(getenv func(string) string) common {
	return common{
		addr:        cmp.Or(getenv("LATCHD_ADDR"), client.DefaultAddr),
		servers:     getenv("LATCHD_SERVERS"),
		authToken:   getenv("LATCHD_AUTH_TOKEN"),
		dialTimeout: client.DefaultDialTimeout,
	}
}

// register adds the common flags to fs, with c's current values as their
// defaults: a subcommand's flag set starts from what was given before it.
func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", c.addr, "server address host:port (env LATCHD_ADDR)")
	fs.StringVar(&c.servers, "servers", c.servers, "comma-separated addresses of one latchd cluster; latchctl follows its leader (env LATCHD_SERVERS)")
	fs.Var((*secret)(&c.authToken), "auth-token", "shared secret, if the server requires one (env LATCHD_AUTH_TOKEN)")
	fs.BoolVar(&c.tls, "tls", c.tls, "connect with TLS (implied by the other --tls-* flags)")
	fs.StringVar(&c.tlsCA, "tls-ca", c.tlsCA, "PEM file of CAs to trust instead of the system's")
	fs.StringVar(&c.tlsServerName, "tls-server-name", c.tlsServerName, "name to verify in the server's certificate (default: the host dialled)")
	fs.StringVar(&c.tlsCert, "tls-cert", c.tlsCert, "PEM client certificate (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", c.tlsKey, "PEM private key of --tls-cert")
	fs.BoolVar(&c.tlsInsecure, "tls-insecure-skip-verify", c.tlsInsecure, "do not verify the server's certificate (testing only)")
	fs.Var((*seconds)(&c.dialTimeout), "dial-timeout", "bound on connecting, TLS and auth")
}

// secret is a string flag whose value never shows in -h.
type secret string

func (s *secret) String() string     { return "" }
func (s *secret) Set(v string) error { *s = secret(v); return nil }

// cluster returns the seed addresses given with --servers, or nil.
func (c *common) cluster() []string {
	var out []string
	for s := range strings.SplitSeq(c.servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// targets returns the addresses of --servers, or --addr.
func (c *common) targets() []string {
	if seeds := c.cluster(); len(seeds) > 0 {
		return seeds
	}
	return []string{c.addr}
}

// tlsConfig builds the TLS configuration the flags ask for, or nil.
func (c *common) tlsConfig() (*tls.Config, error) {
	if !c.tls && c.tlsCA == "" && c.tlsServerName == "" && c.tlsCert == "" && !c.tlsInsecure {
		return nil, nil
	}
	cfg := &tls.Config{ServerName: c.tlsServerName, InsecureSkipVerify: c.tlsInsecure, MinVersion: tls.VersionTLS12} // #nosec G402 -- only when asked for
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca: no certificate in %s", c.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if c.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// options returns the client options of the flags.
func (c *common) options() ([]client.Option, error) {
	cfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithDialTimeout(c.dialTimeout), client.WithAuthToken(c.authToken)}
	if cfg != nil {
		opts = append(opts, client.WithTLS(cfg))
	}
	return opts, nil
}

// querier is what stats, top and health need of a connection: a Conn or,
// with --servers, a Cluster.
type querier interface {
	Stats(ctx context.Context) (*client.Stats, error)
	ConsistentStats(ctx context.Context) (*client.Stats, error)
	Close() error
}

// dial connects to --addr, or to the cluster of --servers.
func (c *common) dial(ctx context.Context) (querier, error) {
	opts, err := c.options()
	if err != nil {
		return nil, err
	}
	if seeds := c.cluster(); len(seeds) > 0 {
		return client.DialCluster(ctx, seeds, opts...)
	}
	return client.Dial(ctx, c.addr, opts...)
}

// seconds is a duration flag that also takes a plain number of seconds.
type seconds time.Duration

func (s *seconds) String() string { return time.Duration(*s).String() }

func (s *seconds) Set(v string) error {
	d, err := time.ParseDuration(v)
	if f, ferr := strconv.ParseFloat(v, 64); ferr == nil { // a plain number is seconds
		d, err = time.Duration(f*float64(time.Second)), nil
	}
	switch {
	case err != nil:
		return errors.New("want seconds or a duration such as 1m30s")
	case d < 0:
		return errors.New("negative duration")
	}
	*s = seconds(d)
	return nil
}

// usageError is a bad command line: exit status 2. printed means the flag
// package has told the user already.
type usageError struct {
	msg     string
	printed bool
}

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// parseNoArgs parses the flags of subcommand sub, which takes no
// arguments.
func parseNoArgs(sub string, fs *flag.FlagSet, args []string) error {
	pos, cmd, err := parse(fs, args)
	if err == nil && (len(pos) > 0 || cmd != nil) {
		return usagef("%s takes no arguments", sub)
	}
	return err
}

// parse parses args with fs, allowing flags between positional arguments,
// and returns the positional arguments and the command after "--" (nil
// when there is no "--").
func parse(fs *flag.FlagSet, args []string) (pos, cmd []string, err error) {
	for i, a := range args {
		if a == "--" {
			cmd = args[i+1:] // not nil, even when empty
			args = args[:i]
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, err
			}
			return nil, nil, &usageError{msg: err.Error(), printed: true}
		}
		if fs.NArg() == 0 {
			return pos, cmd, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := fromEnv(getenv)
	top := flag.NewFlagSet("latchctl", flag.ContinueOnError)
	top.SetOutput(stderr)
	c.register(top)
	top.Usage = func() {
		fmt.Fprint(stderr, usage)
		printFlags(stderr, top)
	}
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if top.NArg() == 0 {
		top.Usage()
		return exitUsage
	}
	sub, rest := top.Arg(0), top.Args()[1:]
	fs := flag.NewFlagSet("latchctl "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of latchctl %s:\n", sub)
		printFlags(stderr, fs)
	}
	c.register(fs)

	var err error
	switch sub {
	case "lock", "sem", "elect":
		return runHeld(sub, fs, &c, rest, stderr)
	case "stats":
		err = runStats(fs, &c, rest, stdout)
	case "top":
		err = runTop(fs, &c, rest, stdout)
	case "health":
		err = runHealth(fs, &c, rest, stdout)
	case "observe":
		err = runObserve(fs, &c, rest, stdout)
	case "member":
		err = runMember(fs, &c, rest, getenv, stdout)
	case "leader":
		err = runLeader(fs, &c, rest, getenv, stdout)
	case "snapshot":
		err = runSnapshot(fs, &c, rest, getenv, stdout)
	case "version":
		fmt.Fprintf(stdout, "latchctl %s\n", buildinfo.Get())
		return 0
	case "help":
		top.Usage()
		return 0
	default:
		fmt.Fprintf(stderr, "latchctl: unknown command %q (try latchctl -h)\n", sub)
		return exitUsage
	}
	return report(err, stderr)
}

// printFlags writes fs's flags as PrintDefaults does, but each written
// --flag, as the docs and the examples write them.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(w)
	_, _ = io.WriteString(w, dashes.ReplaceAllString(b.String(), "$1--")) // nowhere to report a failed write of the help
}

// dashes matches the single dash PrintDefaults puts before each flag name.
var dashes = regexp.MustCompile(`(?m)^(\s+)-`)

// report prints err and returns the exit status it calls for.
func report(err error, stderr io.Writer) int {
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if !ue.printed {
			fmt.Fprintf(stderr, "latchctl: %v\n", err)
		}
		return exitUsage
	}
	fmt.Fprintf(stderr, "latchctl: %v\n", err)
	return exitError
}
