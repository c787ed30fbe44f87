package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/fence"
)

// TestScenarios replays every testdata/*.txt script against a fresh engine.
//
// A script is one step per line; '#' starts a comment. Times are whole
// seconds; owners are numbers. The first non-comment line may be
//
//	config shards=1 maxkeys=0 maxwaiters=0 ttl=33 gc=60
//
// and every other line is
//
//	<sec> <op> <operands> [name=value ...] -> <want> [| <heard> ...]
//
// with these ops:
//
//	acquire <owner> <key> [timeout=S] [limit=N] [ttl=S]   -> granted|queued|timed_out|<error>
//	enqueue <owner> <key> [limit=N] [ttl=S]               -> granted|queued|<error>
//	wait    <owner> <key> [timeout=S]                     -> granted|queued|timed_out|<error>
//	release <owner> <key> [bad]                           -> ok|<error>
//	renew   <owner> <key> [ttl=S] [bad]                   -> ttl=S|<error>
//	drop    <owner>                                       -> ok
//	keep    <owner>    (Disconnect without release)       -> ok
//	expire                                                -> ok
//	state   <key>                                         -> gone|idle|h=1,2 w=3
//
// release and renew use the owner's latest token on the key (bad: the same
// with a wrong salt). A wait that answers the owner's latest token again
// (the grant its enqueue already returned) renders as "granted same". <error> is not_holder, not_queued, lease_expired, already_queued,
// limit_mismatch, max_keys, max_waiters or bad_request. After '|' come the
// Outcomes the step delivered to Sinks, as owner:result (the step's key) or
// owner:key:result; they must be exactly those, in order per key. Every
// grant, returned or delivered, must carry a larger fence than all before.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			runScenario(t, string(data))
		})
	}
}

var scenarioErrs = map[string]error{
	"not_holder":     ErrNotHolder,
	"not_queued":     ErrNotQueued,
	"lease_expired":  ErrLeaseExpired,
	"already_queued": ErrAlreadyQueued,
	"limit_mismatch": ErrLimitMismatch,
	"max_keys":       ErrMaxKeys,
	"max_waiters":    ErrMaxWaiters,
	"bad_request":    ErrBadRequest,
}

type ownerKey struct {
	owner OwnerID
	key   string
}

type scenario struct {
	t      *testing.T
	e      *Engine
	rec    recorder
	tokens map[ownerKey]fence.Token
	fence  uint64 // the largest fence seen
	salt   uint64
}

func runScenario(t *testing.T, script string) {
	cfg := DefaultConfig()
	sc := &scenario{t: t, tokens: make(map[ownerKey]fence.Token)}
	for n, line := range strings.Split(script, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		where := fmt.Sprintf("line %d: %s", n+1, strings.TrimSpace(line))
		if f[0] == "config" {
			if sc.e != nil {
				t.Fatalf("%s: config after the first step", where)
			}
			parseConfig(t, where, f[1:], &cfg)
			continue
		}
		if sc.e == nil {
			e, err := New(cfg)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			sc.e = e
		}
		sc.step(where, f)
	}
}

func parseConfig(t *testing.T, where string, args []string, cfg *Config) {
	for _, a := range args {
		name, val, _ := strings.Cut(a, "=")
		v, err := strconv.Atoi(val)
		if err != nil {
			t.Fatalf("%s: %s: %v", where, a, err)
		}
		switch name {
		case "shards":
			cfg.Shards = v
		case "maxkeys":
			cfg.MaxKeys = v
		case "maxwaiters":
			cfg.MaxWaiters = v
		case "ttl":
			cfg.DefaultTTL = time.Duration(v) * time.Second
		case "gc":
			cfg.GCMaxIdle = time.Duration(v) * time.Second
		default:
			t.Fatalf("%s: unknown config %q", where, name)
		}
	}
}

// stepArgs are a step's parsed operands.
type stepArgs struct {
	owner   OwnerID
	key     string
	timeout int64
	limit   int
	ttl     int64
	bad     bool
}

func (sc *scenario) step(where string, f []string) {
	t := sc.t
	arrow := slices.Index(f, "->")
	if arrow < 2 {
		t.Fatalf("%s: want '<sec> <op> ... -> <want>'", where)
	}
	at, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		t.Fatalf("%s: time: %v", where, err)
	}
	now := at * sec
	op, operands := f[1], f[2:arrow]
	want, heardWant := f[arrow+1:], []string(nil)
	if bar := slices.Index(want, "|"); bar >= 0 {
		want, heardWant = want[:bar], want[bar+1:]
	}
	a := stepArgs{limit: 1}
	var pos []string
	for _, o := range operands {
		name, val, ok := strings.Cut(o, "=")
		if !ok {
			if o == "bad" {
				a.bad = true
			} else {
				pos = append(pos, o)
			}
			continue
		}
		v, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			t.Fatalf("%s: %s: %v", where, o, err)
		}
		switch name {
		case "timeout":
			a.timeout = v
		case "limit":
			a.limit = int(v)
		case "ttl":
			a.ttl = v
		default:
			t.Fatalf("%s: unknown argument %q", where, name)
		}
	}
	switch op {
	case "acquire", "enqueue", "wait", "release", "renew":
		if len(pos) != 2 {
			t.Fatalf("%s: %s wants <owner> <key>", where, op)
		}
		a.owner, a.key = sc.owner(where, pos[0]), pos[1]
	case "drop", "keep":
		if len(pos) != 1 {
			t.Fatalf("%s: %s wants <owner>", where, op)
		}
		a.owner = sc.owner(where, pos[0])
	case "state":
		if len(pos) != 1 {
			t.Fatalf("%s: state wants <key>", where)
		}
		a.key = pos[0]
	}
	got := sc.do(where, now, op, a)
	if w := strings.Join(want, " "); got != w {
		t.Fatalf("%s: got %q, want %q", where, got, w)
	}
	sc.checkHeard(where, a.key, heardWant)
	if err := sc.e.checkInvariants(); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

func (sc *scenario) owner(where, s string) OwnerID {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		sc.t.Fatalf("%s: owner %q: %v", where, s, err)
	}
	return OwnerID(v)
}

// do runs one op and renders what it returned.
func (sc *scenario) do(where string, now int64, op string, a stepArgs) string {
	key := []byte(a.key)
	ttl := time.Duration(a.ttl) * time.Second
	timeout := time.Duration(a.timeout) * time.Second
	tok := sc.tokens[ownerKey{a.owner, a.key}]
	if a.bad {
		tok.Salt ^= 1
	}
	sc.salt++
	req := AcquireReq{Key: key, Owner: a.owner, Limit: a.limit, TTL: ttl, Timeout: timeout, Salt: sc.salt}
	switch op {
	case "acquire":
		out, err := sc.e.Acquire(now, req, sc.rec.sink(a.owner, a.key))
		return sc.outcome(where, a, out, err)
	case "enqueue":
		out, err := sc.e.Enqueue(now, req)
		return sc.outcome(where, a, out, err)
	case "wait":
		out, err := sc.e.Wait(now, key, a.owner, timeout, sc.rec.sink(a.owner, a.key))
		if err == nil && out.Result == Granted && out.Token == tok {
			// The grant the owner's enqueue already returned.
			if out.TTL <= 0 {
				sc.t.Fatalf("%s: collected grant with TTL %v", where, out.TTL)
			}
			return "granted same"
		}
		return sc.outcome(where, a, out, err)
	case "release":
		return errName(sc.e.Release(now, key, tok), "ok")
	case "renew":
		got, err := sc.e.Renew(now, key, tok, ttl)
		return errName(err, fmt.Sprintf("ttl=%d", got/time.Second))
	case "drop":
		sc.e.DropOwner(now, a.owner)
		return "ok"
	case "keep":
		sc.e.Disconnect(now, a.owner, false)
		return "ok"
	case "expire":
		sc.e.Expire(now)
		return "ok"
	case "state":
		return sc.e.keyState(a.key)
	}
	sc.t.Fatalf("%s: unknown op %q", where, op)
	return ""
}

// outcome renders an acquire-like answer and notes a grant's token.
func (sc *scenario) outcome(where string, a stepArgs, out Outcome, err error) string {
	if err != nil {
		return errName(err, "")
	}
	if out.Result == Granted {
		sc.granted(where, a.owner, a.key, out)
	}
	return out.Result.String()
}

func (sc *scenario) granted(where string, owner OwnerID, key string, out Outcome) {
	if out.Token.Fence <= sc.fence {
		sc.t.Fatalf("%s: owner %d on %q granted fence %d, not above %d", where, owner, key, out.Token.Fence, sc.fence)
	}
	if out.TTL <= 0 {
		sc.t.Fatalf("%s: owner %d on %q granted with TTL %v", where, owner, key, out.TTL)
	}
	sc.fence = out.Token.Fence
	sc.tokens[ownerKey{owner, key}] = out.Token
}

func errName(err error, ok string) string {
	if err == nil {
		return ok
	}
	for name, e := range scenarioErrs {
		if errors.Is(err, e) {
			return name
		}
	}
	return err.Error()
}

// checkHeard compares the step's deliveries with want, in order per key.
func (sc *scenario) checkHeard(where, key string, want []string) {
	got := sc.rec.take()
	for i := range want {
		if strings.Count(want[i], ":") == 1 {
			o, r, _ := strings.Cut(want[i], ":")
			want[i] = o + ":" + key + ":" + r
		}
	}
	gotS := make([]string, len(got))
	for i, h := range got {
		gotS[i] = h.String()
		if h.out.Result == Granted {
			sc.granted(where, h.owner, h.key, h.out)
		}
	}
	byKey := func(a, b string) int {
		return strings.Compare(strings.Split(a, ":")[1], strings.Split(b, ":")[1])
	}
	slices.SortStableFunc(gotS, byKey)
	slices.SortStableFunc(want, byKey)
	if !slices.Equal(gotS, want) {
		sc.t.Fatalf("%s: sinks heard %v, want %v", where, gotS, want)
	}
}
