package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/fence"
)

// TestDeterminism plays one random sequence of operations (with the same
// now and salt inputs) on two engines built with one Config: both must
// answer every call alike, deliver the same Outcomes in the same order,
// and end in the same state. This is what lets a Raft log replay the
// engine on every node. Map iteration order differs between the two runs,
// so any decision it made would show up as a difference.
func TestDeterminism(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Shards = 8
	cfg.MaxKeys = 6 // far fewer than the keys used: eviction and ErrMaxKeys happen
	cfg.MaxWaiters = 2
	cfg.DefaultTTL = 3 * time.Second
	cfg.GCMaxIdle = 5 * time.Second
	cfg.FenceSeed = 1 << 40
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			logA, dumpA := playRandom(t, cfg, seed, 3000)
			logB, dumpB := playRandom(t, cfg, seed, 3000)
			if len(logA) != len(logB) {
				t.Fatalf("logs differ in length: %d and %d", len(logA), len(logB))
			}
			for i := range logA {
				if logA[i] != logB[i] {
					t.Fatalf("entry %d differs:\n  %s\n  %s", i, logA[i], logB[i])
				}
			}
			if dumpA != dumpB {
				t.Fatalf("states differ:\n--- A\n%s\n--- B\n%s", dumpA, dumpB)
			}
			// The run must have exercised the interesting paths.
			all := strings.Join(logA, "\n")
			for _, want := range []string{"deliver", "granted", "queued", "timed_out", "canceled",
				"max_keys", "max_waiters", "limit_mismatch", "not_holder", "not_queued", "already_queued"} {
				if !strings.Contains(all, want) {
					t.Errorf("the random run never produced %q", want)
				}
			}
		})
	}
}

type detGrant struct {
	owner OwnerID
	key   string
	tok   fence.Token
}

// detRun plays one engine and logs everything it answers and delivers.
type detRun struct {
	e      *Engine
	log    []string
	grants []detGrant // every token ever granted, in order
}

type detSink struct {
	r     *detRun
	owner OwnerID
	key   string
}

func (s detSink) Deliver(o Outcome) {
	s.r.log = append(s.r.log, fmt.Sprintf("deliver %d %s %s %s %v", s.owner, s.key, o.Result, o.Token, o.TTL))
	if o.Result == Granted {
		s.r.grants = append(s.r.grants, detGrant{s.owner, s.key, o.Token})
	}
}

func (r *detRun) note(op string, owner OwnerID, key string, out Outcome, err error) {
	res := out.Result.String()
	if err != nil {
		res = errName(err, "")
	}
	r.log = append(r.log, fmt.Sprintf("%s %d %s -> %s %s %v", op, owner, key, res, out.Token, out.TTL))
	if err == nil && out.Result == Granted {
		r.grants = append(r.grants, detGrant{owner, key, out.Token})
	}
}

// playRandom runs n random operations from seed and returns the log and
// the final state dump. Its choices depend only on the seed and on what
// the engine answered, so two identical engines get identical inputs.
func playRandom(t *testing.T, cfg Config, seed uint64, n int) ([]string, string) {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &detRun{e: e}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	now := int64(1_700_000_000) * sec
	for range n {
		now += rng.Int64N(300 * int64(time.Millisecond))
		owner := OwnerID(1 + rng.IntN(10))
		k := rng.IntN(20)
		key := fmt.Sprintf("k%02d", k)
		limit := 1
		if k >= 10 {
			limit = 3
		}
		if rng.IntN(40) == 0 {
			limit = 2 // a mismatching semaphore limit
		}
		req := AcquireReq{Key: []byte(key), Owner: owner, Limit: limit, Salt: rng.Uint64()}
		if k >= 18 { // read-write keys: odd owners write, even ones read
			req.Mode = ModeRead + Mode(owner%2)
		}
		if rng.IntN(2) == 0 {
			req.TTL = time.Duration(1+rng.IntN(4)) * time.Second
		}
		sink := detSink{r: r, owner: owner, key: key}
		switch op := rng.IntN(100); {
		case op < 30:
			if rng.IntN(4) > 0 {
				req.Timeout = time.Duration(rng.IntN(3000)) * time.Millisecond
			}
			out, err := e.Acquire(now, req, sink)
			r.note("acquire", owner, key, out, err)
		case op < 40:
			out, err := e.Enqueue(now, req)
			r.note("enqueue", owner, key, out, err)
		case op < 48:
			timeout := time.Duration(rng.IntN(2000)) * time.Millisecond
			out, err := e.Wait(now, req.Key, owner, timeout, sink)
			r.note("wait", owner, key, out, err)
		case op < 68 && len(r.grants) > 0:
			g := r.grants[len(r.grants)-1-rng.IntN(min(len(r.grants), 12))]
			if rng.IntN(10) == 0 {
				g.tok.Salt++
			}
			err := e.Release(now, []byte(g.key), g.tok)
			r.note("release", g.owner, g.key, Outcome{Token: g.tok}, err)
		case op < 76 && len(r.grants) > 0:
			g := r.grants[len(r.grants)-1-rng.IntN(min(len(r.grants), 12))]
			ttl, err := e.RenewAs(now, []byte(g.key), g.tok, req.TTL, owner) // may move the lease
			r.note("renew", g.owner, g.key, Outcome{Token: g.tok, TTL: ttl}, err)
		case op < 79:
			e.DropOwner(now, owner)
			r.note("drop", owner, "", Outcome{}, nil)
		case op < 81:
			e.Disconnect(now, owner, false)
			r.note("keep", owner, "", Outcome{}, nil)
		case op < 83:
			err := e.OpenSession(now, owner, time.Duration(1+rng.IntN(3))*time.Second)
			r.note("open", owner, "", Outcome{}, err)
		case op < 85:
			ok := e.BeginSession(now, owner)
			e.EndSession(now, owner)
			r.note(fmt.Sprint("touch ", ok), owner, "", Outcome{}, nil)
		case op < 86:
			ok := e.CloseSession(now, owner)
			r.note(fmt.Sprint("close ", ok), owner, "", Outcome{}, nil)
		default:
			e.Expire(now)
			r.note("expire", 0, "", Outcome{}, nil)
		}
		if err := e.checkInvariants(); err != nil {
			t.Fatalf("after %s: %v", r.log[len(r.log)-1], err)
		}
	}
	c, g := e.Metrics()
	r.log = append(r.log, fmt.Sprintf("metrics %+v %+v", c, g))
	return r.log, e.dumpState()
}
