package bench

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Mode is a workload: which keys the workers use and how they acquire.
type Mode string

// The workloads.
const (
	// ModeLock gives every worker its own key: no contention, the server's
	// raw acquire+release rate.
	ModeLock Mode = "lock"
	// ModeContended puts every worker on one key: the FIFO hand-off rate.
	ModeContended Mode = "contended"
	// ModeSem puts every worker on one semaphore key with Config.Limit
	// slots.
	ModeSem Mode = "sem"
	// ModeTwoPhase puts every worker on one key and acquires in two steps:
	// enqueue, then wait when the answer was "queued".
	ModeTwoPhase Mode = "twophase"
	// ModeRW puts every worker on one read-write key: each op is a read
	// hold (rl) with probability Config.ReadRatio, else a write hold (wl).
	ModeRW Mode = "rw"
)

// Modes lists the workloads in the order the CLI documents them.
var Modes = []Mode{ModeLock, ModeContended, ModeSem, ModeTwoPhase, ModeRW}

// sharedKey reports whether all workers use one key.
func (m Mode) sharedKey() bool { return m != ModeLock }

// Kind is the protocol a Target speaks.
type Kind string

// The target kinds.
const (
	KindTCP   Kind = "tcp"   // the three-line protocol (latchd, dflockd, Ceiling)
	KindHTTP  Kind = "http"  // latchd's REST API
	KindRedis Kind = "redis" // SET NX PX + compare-and-delete script
	KindEtcd  Kind = "etcd"  // etcd v3 Mutex Lock+Unlock over a lease, via its JSON gateway
	KindMux   Kind = "mux"   // latchd's tagged mode: the workers share Config.Mux connections
)

// Target is one server to drive.
type Target struct {
	// Name labels the target's rows in tables, JSON and plots.
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Addr is host:port.
	Addr string `json:"addr"`
}

// ParseTarget parses "[name=]scheme://host:port" with scheme tcp, http,
// redis or etcd. Without a name the target is named after its scheme and address.
func ParseTarget(s string) (Target, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || strings.Contains(name, "://") {
		name, rest = "", s
	}
	u, err := url.Parse(rest)
	if err != nil {
		return Target{}, fmt.Errorf("bench: target %q: %w", s, err)
	}
	t := Target{Name: name, Kind: Kind(u.Scheme), Addr: u.Host}
	if dialers[t.Kind] == nil {
		return Target{}, fmt.Errorf("bench: target %q: scheme must be tcp, http, redis or etcd", s)
	}
	if u.Path != "" && u.Path != "/" {
		return Target{}, fmt.Errorf("bench: target %q: unexpected path %q", s, u.Path)
	}
	if _, port, err := net.SplitHostPort(t.Addr); err != nil || port == "" {
		return Target{}, fmt.Errorf("bench: target %q: want host:port", s)
	}
	t.Name = cmp.Or(t.Name, string(t.Kind)+"://"+t.Addr)
	return t, nil
}

// ParseWorkers parses a comma-separated list of worker counts, "1,10,50".
func ParseWorkers(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bench: worker count %q: want a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Config is one sweep: every target, at every worker count.
type Config struct {
	// Targets are driven in this order at each worker count; the first is
	// the base of the Ratio column.
	Targets []Target
	// Workers lists the worker counts, one table row per count and target.
	Workers []int
	// Rounds is how many ops each worker runs; used when Duration is 0.
	Rounds int
	// Duration, when set, runs each row for this long instead of Rounds.
	Duration time.Duration
	// Rate, when > 0, is the open-loop schedule in ops/s across a row's
	// workers, latency counted from each op's scheduled start; 0: closed.
	Rate float64
	// Mode is the workload.
	Mode Mode
	// Limit is the semaphore size for ModeSem.
	Limit int
	// ReadRatio is, for ModeRW, the share of ops that take the key to
	// read (0 to 1); the rest take it to write.
	ReadRatio float64
	// AcquireTimeout is the server-side wait of one acquire, whole seconds.
	AcquireTimeout time.Duration
	// LeaseTTL is the lease asked for, whole seconds; 0 leaves the server
	// default (Redis, which has none, then gets RedisTTL).
	LeaseTTL time.Duration
	// KeyPrefix starts every key; ModeLock appends "-<worker>".
	KeyPrefix string
	// AuthToken, when set, is sent with "auth" on every TCP connection.
	AuthToken string
	// DialTimeout bounds connecting and setting up one worker.
	DialTimeout time.Duration
	// Pipeline, over TCP in the one-step modes, sends each op's release
	// in the same write as the next op's acquire: one write and one read
	// wake-up per op instead of two, on both ends.
	Pipeline bool
	// Mux is how many connections the workers of a mux target share.
	Mux int
	// PIDs names, by target name, the server processes whose CPU each
	// of that target's rows measures, with latchd-bench's own (cpu.go).
	PIDs map[string][]int
}

// RedisTTL is the lease a Redis lock gets when Config.LeaseTTL is 0: the
// protocol's default lease.
const RedisTTL = 33 * time.Second

// DefaultConfig returns the defaults of the CLI: a lock sweep of 1 to 500
// workers, 1000 rounds each, against latchd on 127.0.0.1:6388.
func DefaultConfig() Config {
	return Config{
		Targets:        []Target{{Name: "latchd", Kind: KindTCP, Addr: "127.0.0.1:6388"}},
		Workers:        []int{1, 10, 50, 100, 200, 500},
		Rounds:         1000,
		Mode:           ModeLock,
		Limit:          5,
		ReadRatio:      0.9,
		AcquireTimeout: 10 * time.Second,
		KeyPrefix:      "bench",
		DialTimeout:    5 * time.Second,
	}
}

// Validate reports the first setting that cannot run.
func (c Config) Validate() error {
	switch {
	case len(c.Targets) == 0:
		return errors.New("bench: no target")
	case len(c.Workers) == 0:
		return errors.New("bench: no worker count")
	case c.Rounds <= 0 && c.Duration <= 0:
		return errors.New("bench: rounds or duration must be > 0")
	case c.Rate < 0:
		return errors.New("bench: rate must be >= 0")
	case c.Mode == ModeSem && c.Limit <= 0:
		return errors.New("bench: sem mode needs limit > 0")
	case !(c.ReadRatio >= 0 && c.ReadRatio <= 1):
		return errors.New("bench: read ratio must be in [0, 1]")
	case c.AcquireTimeout < 0 || c.AcquireTimeout%time.Second != 0:
		return errors.New("bench: acquire timeout must be whole seconds >= 0")
	case c.LeaseTTL < 0 || c.LeaseTTL%time.Second != 0:
		return errors.New("bench: lease TTL must be whole seconds >= 0")
	case c.KeyPrefix == "" || strings.ContainsAny(c.KeyPrefix, " \t\r\n/?#%"):
		return fmt.Errorf("bench: key prefix %q: want a non-empty key without whitespace, '/', '?', '#' or '%%'", c.KeyPrefix)
	case c.DialTimeout <= 0:
		return errors.New("bench: dial timeout must be > 0")
	}
	if !slices.Contains(Modes, c.Mode) {
		return fmt.Errorf("bench: unknown mode %q (want lock, contended, sem, twophase or rw)", c.Mode)
	}
	for _, w := range c.Workers {
		if w <= 0 {
			return fmt.Errorf("bench: worker count %d must be > 0", w)
		}
	}
	for _, t := range c.Targets {
		if dialers[t.Kind] == nil {
			return fmt.Errorf("bench: target %s: unknown kind %q", t.Name, t.Kind)
		}
		if t.Kind == KindRedis && c.Mode == ModeTwoPhase {
			return fmt.Errorf("bench: target %s: Redis has no queue, so no twophase mode", t.Name)
		}
		if t.Kind == KindRedis && c.Mode == ModeRW {
			return fmt.Errorf("bench: target %s: Redis has no read-write lock, so no rw mode", t.Name)
		}
		if t.Kind == KindEtcd && c.Mode != ModeLock && c.Mode != ModeContended {
			return fmt.Errorf("bench: target %s: etcd is driven in lock and contended modes only", t.Name)
		}
		if t.Kind == KindMux && c.Mode != ModeLock && c.Mode != ModeContended && c.Mode != ModeSem {
			return fmt.Errorf("bench: target %s: a mux target runs lock, contended and sem modes only", t.Name)
		}
		if t.Addr == "" {
			return fmt.Errorf("bench: target %s: no address", t.Name)
		}
	}
	return nil
}

// key returns worker w's key.
func (c Config) key(w int) []byte {
	if c.Mode.sharedKey() {
		return []byte(c.KeyPrefix)
	}
	return strconv.AppendInt([]byte(c.KeyPrefix+"-"), int64(w), 10)
}

func seconds(d time.Duration) int64 { return int64(d / time.Second) }

// timePast is a deadline that has passed: it unblocks a connection's I/O.
var timePast = time.Unix(1, 0)
