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
	}
	var buf bytes.Buffer
	if at, err := f.WriteState(&buf); err != nil || at != index {
		t.Fatalf("WriteState at %d: index %d, %v", index, at, err)
	}
	return fmt.Sprintf("%+v", replies), sha256.Sum256(buf.Bytes()), toks
}

// detLog writes a random log of every kind of entry, applying each to
// ref as it goes (Release and Renew use the tokens ref granted), and
// returns it with ref's replies and digests. Every command carries origin
// 7 (the proposing node's incarnation) and the log's clock: a leader's
// stamps that move on, sometimes a stale one, and new leaders' Restamps
// whose clocks are ahead or behind, with fence floors.
func detLog(t *testing.T, ref *FSM, seed uint64, n int) ([]detEntry, map[Op]int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	owners := []engine.OwnerID{1, 2, 3, 4, 1<<63 | 1, 1<<63 | 2}
	keys := []string{"a", "b", "c", "d", "s"} // s is a semaphore of 2
	var toks []fence.Token
	now := int64(1_000_000_000) * sec // 2001: far from any wall clock the replicas read
	reqID := uint64(0)
	ops := map[Op]int{}
	pick := func() Command {
		reqID++
		key := keys[rng.IntN(len(keys))]
		limit := 1
		if key == "s" {
			limit = 2
		}
		c := Command{Origin: 7, ReqID: reqID, Now: now, Owner: owners[rng.IntN(len(owners))], Key: []byte(key)}
		if rng.IntN(10) == 0 {
			c.Now = now - rng.Int64N(2*sec) // an old leader's entry, stamped earlier
		}
		tok := func() fence.Token {
			if len(toks) == 0 || rng.IntN(5) == 0 {
				return fence.Token{Fence: rng.Uint64N(1 << 20), Salt: rng.Uint64()}
			}
			return toks[rng.IntN(len(toks))]
		}
		ttl := time.Duration(rng.IntN(20)) * time.Second // 0: the engine's default
		switch r := rng.IntN(15); r {
		case 0, 1:
			c.Op, c.Limit, c.TTL, c.Salt = OpAcquire, limit, ttl, rng.Uint64()
			if rng.IntN(2) == 0 {
				c.Timeout = time.Duration(1+rng.IntN(10)) * time.Second
			}
		case 2:
			c.Op, c.Limit, c.TTL, c.Salt = OpEnqueue, limit, ttl, rng.Uint64()
		case 3:
			c.Op, c.Timeout = OpWait, time.Duration(rng.IntN(8))*time.Second
		case 4:
			c.Op, c.Owner, c.Token = OpRelease, 0, tok()
		case 5:
			c.Op, c.Token, c.TTL = OpRenew, tok(), ttl
		case 6:
			c.Op, c.Release, c.Key = OpDisconnect, rng.IntN(2) == 0, nil
		case 7, 8:
			c = Command{Op: OpExpire, Origin: 7, ReqID: reqID, Now: c.Now}
		case 9:
			c.Op, c.Key, c.TTL, c.Salt = OpOpenSession, nil, time.Duration(2+rng.IntN(10))*time.Second, rng.Uint64()|1
		case 10:
			c.Op, c.Key = OpCloseSession, nil
		case 11:
			c.Op, c.Key = OpBeginSession, nil
		case 12:
			c.Op, c.Key = OpEndSession, nil
		default:
			c.Op = OpCancelWait
		}
		return c
	}
	var log []detEntry
	for i := range n {
		now += rng.Int64N(3 * sec)
		var data []byte
		switch k := rng.IntN(20); {
		case k == 0: // an empty entry, or a membership change: no command
		case k == 1: // a new leader, with its own clock and fence floor
			now += rng.Int64N(6*sec) - 3*sec
			reqID++
			c := Command{Op: OpRestamp, Origin: 7, ReqID: reqID, Now: now, Key: fmt.Appendf(nil, "n%d", rng.IntN(3)),
				Addr: "client", Token: fence.Token{Fence: uint64(now) + rng.Uint64N(1<<30)}}
			if rng.IntN(2) == 0 {
				c.HTTPAddr = "http"
			}
			ops[c.Op]++
			data = AppendCommand(nil, &c)
		case k < 6: // commands proposed together
			cnt := 2 + rng.IntN(3)
			data = binary.AppendUvarint([]byte{batchVersion}, uint64(cnt))
			for range cnt {
				c := pick()
				ops[c.Op]++
				data = appendString(data, AppendCommand(nil, &c))
			}
		default:
			c := pick()
			ops[c.Op]++
			data = AppendCommand(nil, &c)
		}
		e := detEntry{data: data}
		var granted []fence.Token
		e.reply, e.digest, granted = detApply(t, ref, uint64(i+1), data)
		log = append(log, e)
		if toks = append(toks, granted...); len(toks) > 32 {
			toks = toks[len(toks)-32:]
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
