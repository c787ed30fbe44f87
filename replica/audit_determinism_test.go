package replica

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

// detEntry is one log entry of the determinism audit: its data (nil for
// an entry that carries no command: an empty entry or a membership
// change) and, once the reference replica applied it, what it answered
// and the digest of the state it left.
type detEntry struct {
	data   []byte
	reply  string
	digest [32]byte
}

// detConfig is one engine shape for every replica, with limits low
// enough that eviction, max_waiters and the per-owner cap happen.
func detConfig() engine.Config {
	cfg := engine.DefaultConfig()
	cfg.Shards = 4
	cfg.MaxKeys = 5
	cfg.MaxWaiters = 2
	cfg.MaxKeysPerOwner = 3
	cfg.DefaultTTL = 3 * time.Second
	cfg.GCMaxIdle = 5 * time.Second
	return cfg
}

// detApply applies data (at index) to f and returns what it answered,
// printed, the state's digest, and the tokens it granted at once.
func detApply(t *testing.T, f *FSM, index uint64, data []byte) (string, [32]byte, []fence.Token) {
	t.Helper()
	var replies []Reply
	if data == nil {
		f.skipEntry(index)
	} else {
		switch r := f.applyEntry(index, data).(type) {
		case Reply:
			replies = []Reply{r}
		case batchReply:
			replies = r
		}
	}
	var toks []fence.Token
	for _, r := range replies {
		if r.Outcome.Result == engine.Granted {
			toks = append(toks, r.Outcome.Token)
		}
		if r.Set != nil && r.Set.Result == engine.Granted {
			toks = append(toks, r.Set.Tokens[:r.Set.N]...)
		}
	}
	var buf bytes.Buffer
	if at, err := f.WriteState(&buf); err != nil || at != index {
		t.Fatalf("WriteState at %d: index %d, %v", index, at, err)
	}
	return fmt.Sprintf("%+v", replies), sha256.Sum256(buf.Bytes()), toks
}

// detGen makes the commands of a random log: a leader's stamps that move
// on (sometimes a stale one), new leaders' Restamps with clocks ahead or
// behind and fence floors; every command carries origin 7 (the proposing
// node's incarnation). Release and Renew name tokens granted earlier.
type detGen struct {
	rng   *rand.Rand
	now   int64
	reqID uint64
	toks  []fence.Token
	set   *Command // the last set with a request id, for a retry of it
}

var (
	detOwners = []engine.OwnerID{1, 2, 3, 4, 1<<63 | 1, 1<<63 | 2}
	detKeys   = []string{"a", "b", "c", "d", "s"} // s is a semaphore of 2
)

func (g *detGen) token() fence.Token {
	if len(g.toks) == 0 || g.rng.IntN(5) == 0 {
		return fence.Token{Fence: g.rng.Uint64N(1 << 20), Salt: g.rng.Uint64()}
	}
	return g.toks[g.rng.IntN(len(g.toks))]
}

// command returns a random client command.
func (g *detGen) command() Command {
	rng := g.rng
	g.reqID++
	key := detKeys[rng.IntN(len(detKeys))]
	limit := 1
	if key == "s" {
		limit = 2
	}
	c := Command{Origin: 7, ReqID: g.reqID, Now: g.now, Owner: detOwners[rng.IntN(len(detOwners))], Key: []byte(key)}
	if rng.IntN(10) == 0 {
		c.Now = g.now - rng.Int64N(2*sec) // an old leader's entry, stamped earlier
	}
	ttl := time.Duration(rng.IntN(20)) * time.Second // 0: the engine's default
	switch rng.IntN(19) {
	case 0, 1:
		c.Op, c.Limit, c.TTL, c.Salt = OpAcquire, limit, ttl, rng.Uint64()
		if rng.IntN(2) == 0 {
			c.Timeout = time.Duration(1+rng.IntN(10)) * time.Second
		}
		if rng.IntN(4) == 0 { // a request id, some of them retried
			c.ReqKey = fmt.Appendf(nil, "id%d", rng.IntN(40))
		}
	case 2:
		c.Op, c.Limit, c.TTL, c.Salt = OpEnqueue, limit, ttl, rng.Uint64()
	case 3:
		c.Op, c.Timeout = OpWait, time.Duration(rng.IntN(8))*time.Second
	case 4:
		c.Op, c.Owner, c.Token = OpRelease, 0, g.token()
	case 5:
		c.Op, c.Token, c.TTL = OpRenew, g.token(), ttl
	case 6:
		c.Op, c.Release, c.Key = OpDisconnect, rng.IntN(2) == 0, nil
	case 7, 8:
		c = Command{Op: OpExpire, Origin: 7, ReqID: g.reqID, Now: c.Now}
	case 9:
		c.Op, c.Key, c.TTL, c.Salt = OpOpenSession, nil, time.Duration(2+rng.IntN(10))*time.Second, rng.Uint64()|1
	case 10:
		c.Op, c.Key = OpCloseSession, nil
	case 11:
		c.Op, c.Key = OpBeginSession, nil
	case 12:
		c.Op, c.Key = OpEndSession, nil
	case 13: // read-write keys: the mode rides in Limit
		c.Op, c.Key, c.Limit, c.TTL, c.Salt = OpRWAcquire, []byte("rw"), 1+rng.IntN(2), ttl, rng.Uint64()
	case 14:
		c.Op, c.Key, c.Limit, c.TTL, c.Salt = OpRWEnqueue, []byte("rw"), 1+rng.IntN(2), ttl, rng.Uint64()
	case 15, 16: // many keys at once, in one entry
		if g.set != nil && rng.IntN(3) == 0 { // its retry, from another owner, soon after
			r := *g.set
			r.ReqID, r.Now, r.Owner = g.reqID, c.Now, c.Owner
			return r
		}
		perm := rng.Perm(4)[:1+rng.IntN(3)]
		ks := make([]string, len(perm))
		for i, p := range perm {
			ks[i] = detKeys[p]
		}
		c.Op, c.Key, c.Limit, c.TTL, c.Salt = OpAcquireSet, []byte(strings.Join(ks, " ")), 1, ttl, rng.Uint64()
		if rng.IntN(3) != 0 {
			c.Timeout = time.Duration(1+rng.IntN(10)) * time.Second
		}
		if rng.IntN(3) == 0 { // a request id, some retried: a waiting set taken over in its place
			c.ReqKey = fmt.Appendf(nil, "set%d.%s", rng.IntN(3), c.Key) // a retry names the same keys
			set := c
			g.set = &set
		}
		if rng.IntN(4) == 0 {
			c.Op, c.Key, c.Limit, c.TTL, c.Salt, c.Timeout, c.ReqKey = OpCancelSet, []byte(ks[0]), 0, 0, 0, 0, nil
		}
	default:
		c.Op = OpCancelWait
	}
	return c
}

// restamp returns a new leader's first entry: its own clock, up to 3 s
// off the last leader's, and a fence floor.
func (g *detGen) restamp() Command {
	g.now += g.rng.Int64N(6*sec) - 3*sec
	g.reqID++
	c := Command{Op: OpRestamp, Origin: 7, ReqID: g.reqID, Now: g.now, Key: fmt.Appendf(nil, "n%d", g.rng.IntN(3)),
		Addr: "client", Token: fence.Token{Fence: uint64(g.now) + g.rng.Uint64N(1<<30)}}
	if g.rng.IntN(2) == 0 {
		c.HTTPAddr = "http"
	}
	return c
}

// detLog writes a random log of n entries of every kind, applying each
// to ref as it goes (Release and Renew use the tokens ref granted), and
// returns it with ref's replies and digests, and how many commands of
// each Op it holds.
func detLog(t *testing.T, ref *FSM, seed uint64, n int) ([]detEntry, map[Op]int) {
	g := &detGen{rng: rand.New(rand.NewPCG(seed, 99)), now: int64(1_000_000_000) * sec} // 2001: far from any wall clock
	ops := map[Op]int{}
	var log []detEntry
	for i := range n {
		g.now += g.rng.Int64N(3 * sec)
		var data []byte
		switch k := g.rng.IntN(20); {
		case k == 0: // an empty entry, or a membership change: no command
		case k == 1:
			c := g.restamp()
			ops[c.Op]++
			data = AppendCommand(nil, &c)
		case k < 6: // commands proposed together
			cnt := 2 + g.rng.IntN(3)
			data = binary.AppendUvarint([]byte{batchVersion}, uint64(cnt))
			for range cnt {
				c := g.command()
				ops[c.Op]++
				data = appendString(data, AppendCommand(nil, &c))
			}
		default:
			c := g.command()
			ops[c.Op]++
			data = AppendCommand(nil, &c)
		}
		e := detEntry{data: data}
		var granted []fence.Token
		e.reply, e.digest, granted = detApply(t, ref, uint64(i+1), data)
		log = append(log, e)
		if g.toks = append(g.toks, granted...); len(g.toks) > 32 {
			g.toks = g.toks[len(g.toks)-32:]
		}
	}
	return log, ops
}

// TestAudit_ApplyIsDeterministic: applying the log reads nothing of the
// node it runs on. The same log of every kind of entry (each Op, batches,
// Restamps with clock skew and fence floors, sessions, renews, expiries
// at the log's clock, entries with no command) is applied by three
// replicas that differ in everything a node may differ in: the proposing
// node's incarnation (whose parked requests get Sinks), applied inside a
// synctest bubble whose clock reads the year 2000 and moves an hour per
// entry; a follower on the real clock; and a node that joins half way from
// the other's snapshot. After every entry all three must answer alike and
// hold the same state. An apply that read time.Now, a random number, or
// anything of its own node would make them differ.
func TestAudit_ApplyIsDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			ref, err := NewFSM(detConfig(), 9) // a follower: no Sinks
			if err != nil {
				t.Fatal(err)
			}
			log, ops := detLog(t, ref, seed, 1500)
			for op := OpAcquire; op < opEnd; op++ {
				if ops[op] == 0 {
					t.Fatalf("the log has no %v", op)
				}
			}
			var all strings.Builder
			for _, e := range log {
				all.WriteString(e.reply)
			}
			for _, want := range []string{"Result:granted", "Result:queued", "Result:timed_out", "OK:true",
				"does not hold", "max"} {
				if !strings.Contains(all.String(), want) {
					t.Fatalf("no reply in the log has %q", want)
				}
			}
			same := func(t *testing.T, who string, f *FSM, i int) {
				t.Helper()
				e := log[i]
				reply, digest, _ := detApply(t, f, uint64(i+1), e.data)
				if reply != e.reply || digest != e.digest {
					t.Fatalf("%s at entry %d answered %s and holds state %x; the follower answered %s and holds %x",
						who, i+1, reply, digest[:6], e.reply, e.digest[:6])
				}
			}
			synctest.Test(t, func(t *testing.T) {
				f, err := NewFSM(detConfig(), 7) // the proposer: its parked requests have Sinks
				if err != nil {
					t.Fatal(err)
				}
				heard := 0
				for i, e := range log {
					registerSinks(f, e.data, func(engine.Outcome) { heard++ })
					same(t, "the proposer", f, i)
					time.Sleep(time.Hour) // the bubble's clock only
				}
				if heard == 0 {
					t.Fatal("no parked request ever heard its outcome")
				}
			})
			// A node that applies half the log, then installs its own
			// snapshot in a new FSM (as a node restarting or catching
			// up does) and applies the rest.
			mid, err := NewFSM(detConfig(), 11)
			if err != nil {
				t.Fatal(err)
			}
			half := len(log) / 2
			for i := range half {
				same(t, "a late replica", mid, i)
			}
			var snap bytes.Buffer
			if _, err := mid.WriteState(&snap); err != nil {
				t.Fatal(err)
			}
			if mid, err = NewFSM(detConfig(), 11); err != nil {
				t.Fatal(err)
			}
			if err := mid.Restore(snap.Bytes()); err != nil {
				t.Fatal(err)
			}
			for i := half; i < len(log); i++ {
				same(t, "a replica restored from a snapshot", mid, i)
			}
		})
	}
}

// funcSink is a Sink that calls a function.
type funcSink func(engine.Outcome)

func (s funcSink) Deliver(o engine.Outcome) { s(o) }

// registerSinks registers s for every Acquire and Wait of f's origin in
// an entry's data, as the proposing node does before it proposes.
func registerSinks(f *FSM, data []byte, s func(engine.Outcome)) {
	var c Command
	one := func(b []byte) {
		if DecodeCommand(b, &c) == nil && c.Origin == f.origin && (c.Op == OpAcquire || c.Op == OpWait) {
			f.register(c.ReqID, funcSink(s))
		}
	}
	if len(data) == 0 {
		return
	}
	if data[0] != batchVersion {
		one(data)
		return
	}
	d := decoder{b: data[1:]}
	for range d.uvarint() {
		one(d.bytes())
	}
}

// TestAudit_ApplyIsDeterministicAcrossNodes: nodes that differ in every
// setting a node may have of its own (how often it looks for due
// deadlines, its batch wait, when it snapshots and compacts, its fence
// floor, its addresses) serve one workload of every kind of command, with
// leases and waits short enough that expiries, driven by the leader's
// clock through the log, run all along; a node joins, leadership moves to
// a node with another clock and floor, a node leaves. Every member must
// then hold the same state at the same index.
func TestAudit_ApplyIsDeterministicAcrossNodes(t *testing.T) {
	local := map[string]func(*Config){
		"n0": func(c *Config) {
			c.ExpireEvery, c.BatchWait, c.SnapshotThreshold, c.TrailingLogs = 2*time.Millisecond, 0, 8, 4
		},
		"n1": func(c *Config) {
			c.ExpireEvery, c.BatchWait, c.FenceFloor = 20*time.Millisecond, 5*time.Millisecond, 1<<62
		},
		"n2": func(c *Config) {
			c.ExpireEvery, c.BatchWait, c.SnapshotThreshold = 7*time.Millisecond, time.Millisecond, 50
		},
		"n3": func(c *Config) { c.SnapshotThreshold, c.TrailingLogs, c.FenceFloor = 5, 2, 1<<61 },
	}
	c := newCluster(t, 3, func(cfg *Config) {
		if f := local[cfg.NodeID]; f != nil {
			f(cfg)
		}
	})
	w := &detWorkload{rng: rand.New(rand.NewPCG(7, 7))}
	run := func(n int) { w.run(t, c, n) }
	run(120)
	joined := c.addNode(t) // n3: a membership entry, then a snapshot and the log
	run(120)
	l := c.leader(t)
	to := c.nodes[(c.index(l)+1)%3]
	if err := l.TransferLeadership(ctxT(t, 5*time.Second), to.ID()); err != nil {
		t.Fatalf("transfer to %s: %v", to.ID(), err)
	}
	run(120)
	l = c.leader(t)
	var gone *Node
	for _, n := range c.live() {
		if n != l && n != joined {
			gone = n
			break
		}
	}
	if err := l.RemoveServer(ctxT(t, 5*time.Second), gone.ID()); err != nil {
		t.Fatalf("remove %s: %v", gone.ID(), err)
	}
	c.kill(t, c.index(gone))
	run(120)
	waitSame(t, c.live()...)
	if n := c.live()[0]; n.FSM().Restores() == 0 && joined.FSM().Restores() == 0 {
		t.Log("no node installed a snapshot")
	}
}

// detWorkload sends commands of every kind to a cluster's leader, with
// leases and waits short enough that they expire all along.
type detWorkload struct {
	rng  *rand.Rand
	toks []detTok
}

type detTok struct {
	key string
	tok fence.Token
}

// run sends n commands; their errors (not_leader while leadership moves,
// the engine's answers) do not matter here.
func (w *detWorkload) run(t *testing.T, c *cluster, n int) {
	rng := w.rng
	for range n {
		l := c.leader(t)
		ctx := ctxT(t, 2*time.Second)
		key := []byte(fmt.Sprint("k", rng.IntN(6)))
		owner := engine.OwnerID(1 + rng.IntN(5))
		ttl := time.Duration(300+rng.IntN(1500)) * time.Millisecond
		switch rng.IntN(9) {
		case 0, 1:
			out, err := l.Acquire(ctx, engine.AcquireReq{Key: key, Owner: owner, Limit: 1, TTL: ttl,
				Timeout: time.Duration(rng.IntN(300)) * time.Millisecond}, newChanSink())
			if err == nil && out.Result == engine.Granted {
				w.toks = append(w.toks, detTok{string(key), out.Token})
			}
		case 2:
			_, _ = l.Enqueue(ctx, engine.AcquireReq{Key: key, Owner: owner, Limit: 1, TTL: ttl})
		case 3:
			_, _ = l.Wait(ctx, key, owner, time.Duration(rng.IntN(200))*time.Millisecond, newChanSink())
		case 4, 5:
			if len(w.toks) > 0 {
				g := w.toks[rng.IntN(len(w.toks))]
				if rng.IntN(2) == 0 {
					_ = l.Release(ctx, []byte(g.key), g.tok)
				} else {
					_, _ = l.Renew(ctx, []byte(g.key), g.tok, ttl, owner)
				}
			}
		case 6:
			_ = l.Disconnect(ctx, owner, rng.IntN(2) == 0)
		case 7:
			s := engine.OwnerID(1<<63 | uint64(rng.IntN(3)))
			_ = l.OpenSession(ctx, s, time.Second, rng.Uint64()|1)
			_, _ = l.BeginSession(ctx, s)
			_, _ = l.Acquire(ctx, engine.AcquireReq{Key: key, Owner: s, Limit: 1, TTL: ttl}, nil)
			_ = l.EndSession(ctx, s)
			if rng.IntN(2) == 0 {
				_, _ = l.CloseSession(ctx, s)
			}
		default:
			_, _ = l.CancelWait(ctx, key, owner)
		}
	}
}

// TestAudit_EngineSettingsMustMatch: the engine's limits are read while
// entries apply, so a node started with other limits than the leader's
// would apply the same log otherwise. It must say so (unready, naming the
// leader) rather than diverge quietly; the nodes built like the leader
// stay ready.
func TestAudit_EngineSettingsMustMatch(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		if cfg.NodeID == "n2" {
			cfg.Engine.MaxWaiters = 1 // the others: no cap
		}
	})
	l := c.leader(t)
	odd := c.nodes[2]
	if l == odd {
		if err := l.TransferLeadership(ctxT(t, 5*time.Second), c.nodes[0].ID()); err != nil {
			t.Fatalf("transfer: %v", err)
		}
		l = c.leaderAmong(t, c.nodes[:2])
	}
	poll(t, 5*time.Second, "the odd node unready", func() bool {
		err := odd.Ready()
		return err != nil && strings.Contains(err.Error(), "engine settings differ from leader "+l.ID())
	}, func() string { return fmt.Sprint(odd.Ready()) })
	for _, n := range c.nodes[:2] {
		poll(t, 5*time.Second, n.ID()+" ready", func() bool { return n.Ready() == nil },
			func() string { return fmt.Sprint(n.Ready()) })
	}
}
