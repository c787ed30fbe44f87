package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/fence"
)

// setRec records what a set's SetSink hears.
type setRec struct {
	mu  sync.Mutex
	got []SetOutcome
}

func (r *setRec) DeliverSet(o *SetOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, *o)
}

func (r *setRec) take() []SetOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

func keysOf(ks ...string) [][]byte {
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = []byte(k)
	}
	return out
}

func setReq(owner OwnerID, timeout time.Duration, ks ...string) *SetReq {
	return &SetReq{Keys: keysOf(ks...), Owner: owner, Limit: 1, TTL: time.Minute, Timeout: timeout, Salt: uint64(owner)}
}

func TestSetGrantedAtOnceWithAFencePerKey(t *testing.T) {
	e := newTestEngine(t, nil)
	out, err := e.AcquireSet(0, setReq(1, 0, "a", "b", "c"), nil)
	if err != nil || out.Result != Granted || out.N != 3 {
		t.Fatalf("AcquireSet = %+v, %v", out.Result, err)
	}
	seen := map[uint64]bool{}
	for _, tok := range out.Tokens[:3] {
		if tok.Fence == 0 || seen[tok.Fence] {
			t.Fatalf("fences not distinct: %v", out.Tokens[:3])
		}
		seen[tok.Fence] = true
	}
	// Each key is held by its own token: a single acquire finds it busy.
	if o, _ := e.Acquire(0, AcquireReq{Key: []byte("b"), Owner: 2, Limit: 1}, nil); o.Result != TimedOut {
		t.Fatalf("b taken while the set holds it: %v", o.Result)
	}
	if err := e.ReleaseSet(0, keysOf("a", "b", "c"), out.Tokens[:3], nil); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, e, 0, AcquireReq{Key: []byte("b"), Owner: 2, Limit: 1})
}

func TestSetAllOrNoneAndFIFOWithSingleWaiters(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	var sr setRec
	hb := mustGrant(t, e, 0, AcquireReq{Key: []byte("b"), Owner: 9, Limit: 1, TTL: time.Minute})
	if out, _ := e.AcquireSet(0, setReq(1, 0, "a", "b"), nil); out.Result != TimedOut {
		t.Fatalf("try of a busy set = %v, want timed_out", out.Result)
	}
	if out, _ := e.AcquireSet(0, setReq(1, time.Minute, "a", "b"), &sr); out.Result != Queued {
		t.Fatalf("set = %v, want queued", out.Result)
	}
	// a is free, but the set queued first: a single waiter on a waits
	// behind it (strict FIFO), and the set took nothing yet.
	if o, _ := e.Acquire(0, AcquireReq{Key: []byte("a"), Owner: 2, Limit: 1, Timeout: time.Minute}, rec.sink(2, "a")); o.Result != Queued {
		t.Fatalf("single on a = %v, want queued behind the set", o.Result)
	}
	if info, _ := e.Inspect(0, "a"); len(info.Holders) != 0 {
		t.Fatalf("a held while the set waits: %+v", info)
	}
	if err := e.Release(sec, []byte("b"), hb.Token); err != nil {
		t.Fatal(err)
	}
	got := sr.take()
	if len(got) != 1 || got[0].Result != Granted || got[0].N != 2 {
		t.Fatalf("set heard %+v, want granted", got)
	}
	if g := rec.take(); len(g) != 0 {
		t.Fatalf("single waiter heard %v before the set let go", g)
	}
	if err := e.ReleaseSet(sec, keysOf("a", "b"), got[0].Tokens[:2], nil); err != nil {
		t.Fatal(err)
	}
	if g := rec.take(); len(g) != 1 || g[0].out.Result != Granted || g[0].out.Token.Fence <= got[0].Tokens[0].Fence {
		t.Fatalf("single waiter heard %v, want granted with a higher fence", g)
	}
}

func TestSetTimeoutWithdrawsFromEveryKey(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	var sr setRec
	ha := mustGrant(t, e, 0, AcquireReq{Key: []byte("a"), Owner: 9, Limit: 1, TTL: time.Hour})
	e.AcquireSet(0, setReq(1, time.Second, "a", "b"), &sr)
	e.Acquire(0, AcquireReq{Key: []byte("b"), Owner: 2, Limit: 1, Timeout: time.Hour}, rec.sink(2, "b"))
	e.Expire(2 * sec)
	if g := sr.take(); len(g) != 1 || g[0].Result != TimedOut {
		t.Fatalf("set heard %+v, want timed_out", g)
	}
	// Withdrawn from b, so b's single waiter, behind it, is granted.
	if g := rec.take(); len(g) != 1 || g[0].out.Result != Granted {
		t.Fatalf("b's waiter heard %v, want granted", g)
	}
	if info, _ := e.Inspect(2*sec, "a"); len(info.Waiters) != 0 || len(info.Holders) != 1 {
		t.Fatalf("a after the timeout: %+v", info)
	}
	if err := e.Release(2*sec, []byte("a"), ha.Token); err != nil {
		t.Fatal(err)
	}
}

func TestSetDisconnectAndCancel(t *testing.T) {
	e := newTestEngine(t, nil)
	var sr, sr2 setRec
	h := mustGrant(t, e, 0, AcquireReq{Key: []byte("c"), Owner: 9, Limit: 1, TTL: time.Hour})
	e.AcquireSet(0, setReq(1, time.Hour, "a", "c"), &sr)
	e.AcquireSet(0, setReq(3, time.Hour, "b", "c"), &sr2)
	e.Disconnect(0, 1, true)
	if g := sr.take(); len(g) != 1 || g[0].Result != Canceled {
		t.Fatalf("dropped owner's set heard %+v, want canceled", g)
	}
	if e.CancelSet(0, []byte("a"), 3) || !e.CancelSet(0, []byte("b"), 3) {
		t.Fatal("CancelSet found the wrong set")
	}
	if g := sr2.take(); len(g) != 1 || g[0].Result != Canceled {
		t.Fatalf("canceled set heard %+v", g)
	}
	for _, k := range []string{"a", "b", "c"} {
		if info, _ := e.Inspect(0, k); len(info.Waiters) != 0 {
			t.Fatalf("%s still has waiters: %+v", k, info)
		}
	}
	// A held set is released by a disconnect, as single keys are.
	e.Release(0, []byte("c"), h.Token)
	out, _ := e.AcquireSet(0, setReq(4, 0, "a", "c"), nil)
	e.Disconnect(0, 4, true)
	mustGrant(t, e, 0, AcquireReq{Key: []byte("a"), Owner: 5, Limit: 1})
	if out.Result != Granted {
		t.Fatal(out.Result)
	}
}

func TestSetSemaphoreSlots(t *testing.T) {
	e := newTestEngine(t, nil)
	r := &SetReq{Keys: keysOf("s1", "s2"), Owner: 1, Limit: 2, TTL: time.Minute}
	o1, _ := e.AcquireSet(0, r, nil)
	r.Owner = 2
	o2, _ := e.AcquireSet(0, r, nil)
	r.Owner, r.Timeout = 3, time.Minute
	var sr setRec
	o3, _ := e.AcquireSet(0, r, &sr)
	if o1.Result != Granted || o2.Result != Granted || o3.Result != Queued {
		t.Fatalf("%v %v %v", o1.Result, o2.Result, o3.Result)
	}
	e.Release(0, []byte("s1"), o1.Tokens[0])
	if g := sr.take(); len(g) != 0 {
		t.Fatalf("granted with s2 full: %+v", g)
	}
	e.Release(0, []byte("s2"), o2.Tokens[1])
	if g := sr.take(); len(g) != 1 || g[0].Result != Granted {
		t.Fatalf("heard %+v", g)
	}
	if _, err := e.AcquireSet(0, &SetReq{Keys: keysOf("s1", "x"), Owner: 4, Limit: 1}, nil); err != ErrLimitMismatch {
		t.Fatalf("limit mismatch: %v", err)
	}
	for _, bad := range []*SetReq{{Keys: keysOf("a", "a"), Limit: 1}, {Limit: 1}, {Keys: keysOf(""), Limit: 1}} {
		if _, err := e.AcquireSet(0, bad, nil); err != ErrBadRequest {
			t.Fatalf("%q: %v", bad.Keys, err)
		}
	}
}

// TestSetStateRoundTrip writes a state with waiting sets, reads it into a
// fresh engine, and checks the bytes and the behaviour carry over.
func TestSetStateRoundTrip(t *testing.T) {
	e := newTestEngine(t, nil)
	h := mustGrant(t, e, 0, AcquireReq{Key: []byte("b"), Owner: 9, Limit: 1, TTL: time.Hour})
	e.AcquireSet(0, setReq(1, time.Hour, "a", "b", "z"), &setRec{})
	e.AcquireSet(0, setReq(2, time.Hour, "b", "a"), &setRec{})
	e.Acquire(0, AcquireReq{Key: []byte("a"), Owner: 3, Limit: 1, Timeout: time.Hour}, nil)
	st := e.AppendState(nil)
	if st[len(stateMagic)] != setsVersion {
		t.Fatalf("a state with waiting sets has version %d, want %d", st[len(stateMagic)], setsVersion)
	}
	e2 := newTestEngine(t, nil)
	if err := e2.ReadState(bytes.NewReader(st)); err != nil {
		t.Fatal(err)
	}
	if st2 := e2.AppendState(nil); !bytes.Equal(st, st2) {
		t.Fatal("state differs after a round trip")
	}
	for _, en := range []*Engine{e, e2} {
		en.Release(sec, []byte("b"), h.Token)
	}
	a1, _ := e.Inspect(sec, "a")
	a2, _ := e2.Inspect(sec, "a")
	if len(a1.Holders) != 1 || fmt.Sprint(a1) != fmt.Sprint(a2) {
		t.Fatalf("after release: %+v vs %+v", a1, a2)
	}
	if !bytes.Equal(e.AppendState(nil), e2.AppendState(nil)) {
		t.Fatal("states differ after the same release")
	}
	// Without a waiting set the state is written as version 3, which
	// engines built before sets read.
	e.Disconnect(sec, 1, true)
	e.Disconnect(sec, 2, true)
	if v := e.AppendState(nil)[len(stateMagic)]; v != setsVersion-1 {
		t.Fatalf("a state without sets has version %d, want %d", v, setsVersion-1)
	}
}

// TestSetsCrossingNoDeadlock has many goroutines take random sets of a
// few keys, in random orders, waiting without a timeout that could hide a
// deadlock; each checks it is alone on its keys. All must finish.
func TestSetsCrossingNoDeadlock(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.Shards = 4 })
	keys := []string{"a", "b", "c", "d", "e"}
	var inUse [5]atomic.Int32
	const workers, rounds = 16, 200
	var wg sync.WaitGroup
	var done atomic.Int64
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			owner := OwnerID(w + 1)
			for range rounds {
				perm := rng.Perm(len(keys))[:1+rng.IntN(3)]
				var ks []string
				for _, p := range perm {
					ks = append(ks, keys[p])
				}
				ch := make(chan SetOutcome, 1)
				out, err := e.AcquireSet(0, setReq(owner, time.Hour, ks...), setChan(ch))
				if err != nil {
					t.Error(err)
					return
				}
				if out.Result == Queued {
					out = <-ch
				}
				if out.Result != Granted {
					t.Errorf("set %v: %v", ks, out.Result)
					return
				}
				for _, p := range perm {
					if inUse[p].Add(1) != 1 {
						t.Errorf("key %s held twice", keys[p])
					}
				}
				for _, p := range perm {
					inUse[p].Add(-1)
				}
				if err := e.ReleaseSet(0, keysOf(ks...), out.Tokens[:len(ks)], nil); err != nil {
					t.Error(err)
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if done.Load() != workers*rounds {
		t.Fatalf("%d of %d sets done", done.Load(), workers*rounds)
	}
}

type setChan chan SetOutcome

func (c setChan) DeliverSet(o *SetOutcome) { c <- *o }

func BenchmarkAcquireSet(b *testing.B) {
	for _, n := range []int{2, 8} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			e := newTestEngine(b, nil)
			var ks []string
			for i := range n {
				ks = append(ks, fmt.Sprintf("k%d", i))
			}
			req := setReq(1, 0, ks...)
			var toks [MaxSetKeys]fence.Token
			b.ReportAllocs()
			for b.Loop() {
				out, err := e.AcquireSet(0, req, nil)
				if err != nil || out.Result != Granted {
					b.Fatal(out.Result, err)
				}
				toks = out.Tokens
				if err := e.ReleaseSet(0, req.Keys, toks[:n], nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSetsDeterministic feeds two engines the same random mix of sets,
// single keys, releases, disconnects and expiries: they must write the
// same state after every step (a replica applies the log this way).
func TestSetsDeterministic(t *testing.T) {
	engines := [2]*Engine{newTestEngine(t, func(c *Config) { c.Shards = 8 }), newTestEngine(t, func(c *Config) { c.Shards = 8 })}
	rng := rand.New(rand.NewPCG(3, 4))
	keys := []string{"a", "b", "c", "d", "e", "f"}
	type held struct {
		key string
		tok fence.Token
	}
	var holds []held
	var recs [2]setRec
	now := int64(0)
	for step := range 400 {
		now += int64(rng.IntN(300)) * int64(time.Millisecond)
		owner := OwnerID(1 + rng.IntN(6))
		op := rng.IntN(10)
		var ks []string
		for _, p := range rng.Perm(len(keys))[:1+step%3] {
			ks = append(ks, keys[p])
		}
		var outs [2][]held
		for i, e := range engines {
			switch {
			case op < 4:
				r := &SetReq{Keys: keysOf(ks...), Owner: owner, Limit: 1, TTL: 2 * time.Second, Timeout: time.Second, Salt: uint64(step)}
				if out, _ := e.AcquireSet(now, r, &recs[i]); out.Result == Granted {
					for j, k := range ks {
						outs[i] = append(outs[i], held{k, out.Tokens[j]})
					}
				}
			case op < 6:
				k := keys[step%len(keys)]
				if out, _ := e.Acquire(now, AcquireReq{Key: []byte(k), Owner: owner, Limit: 1, TTL: 2 * time.Second,
					Timeout: time.Second, Salt: uint64(step)}, nil); out.Result == Granted {
					outs[i] = append(outs[i], held{k, out.Token})
				}
			case op < 8 && len(holds) > 0:
				h := holds[step%len(holds)]
				e.Release(now, []byte(h.key), h.tok)
			case op < 9:
				e.Disconnect(now, owner, step%2 == 0)
			default:
				e.Expire(now)
			}
		}
		holds = append(holds, outs[0]...)
		if a, b := engines[0].AppendState(nil), engines[1].AppendState(nil); !bytes.Equal(a, b) {
			t.Fatalf("step %d (op %d): states differ", step, op)
		}
	}
	heard := map[Result]int{}
	for _, o := range recs[0].take() {
		heard[o.Result]++
	}
	if heard[Granted] == 0 || heard[TimedOut] == 0 {
		t.Fatalf("queued sets heard %v: want some granted and some timed out", heard)
	}
}

// BenchmarkSetHandOff: a set queued behind a held key is granted when the
// key is released (the waiting path: its set record is reused).
func BenchmarkSetHandOff(b *testing.B) {
	e := newTestEngine(b, nil)
	req := setReq(1, time.Hour, "a", "b")
	hold := AcquireReq{Key: []byte("a"), Owner: 2, Limit: 1, TTL: time.Minute}
	var sink setRec
	b.ReportAllocs()
	for b.Loop() {
		h, _ := e.Acquire(0, hold, nil)
		if out, _ := e.AcquireSet(0, req, &sink); out.Result != Queued {
			b.Fatal(out.Result)
		}
		e.Release(0, hold.Key, h.Token)
		got := sink.got[0]
		sink.got = sink.got[:0]
		if got.Result != Granted {
			b.Fatal(got.Result)
		}
		e.ReleaseSet(0, req.Keys, got.Tokens[:2], nil)
	}
}
