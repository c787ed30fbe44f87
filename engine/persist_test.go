package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// persistConfig is TestDeterminism's Config: small enough that eviction,
// queue caps and GC all happen in a random run.
func persistConfig() Config {
	cfg := DefaultConfig()
	cfg.Shards = 8
	cfg.MaxKeys = 6
	cfg.MaxWaiters = 2
	cfg.DefaultTTL = 3 * time.Second
	cfg.GCMaxIdle = 5 * time.Second
	cfg.FenceSeed = 1 << 40
	return cfg
}

// restoredSink stands in, in tests, for the Sink a restored parked
// request no longer has, so that dumpState and checkInvariants see it as
// parked.
type restoredSink struct{}

func (restoredSink) Deliver(Outcome) {}

// markParked gives every parked waiter without a Sink (one restored by
// ReadState) a restoredSink, and returns how many it marked.
func markParked(e *Engine) int {
	n := 0
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		for _, en := range s.heap {
			if !en.holding && en.sink == nil {
				en.sink = restoredSink{}
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// persistRun plays random operations on one engine, like playRandom, but
// on an engine it is given and in phases: a Sink made in an earlier phase
// is silent, because a restored copy of the engine does not have it.
type persistRun struct {
	e      *Engine
	phase  int
	log    []string
	grants []detGrant
}

type phaseSink struct {
	r     *persistRun
	phase int
	owner OwnerID
	key   string
}

func (s phaseSink) Deliver(o Outcome) {
	if s.phase != s.r.phase {
		return
	}
	s.r.log = append(s.r.log, fmt.Sprintf("deliver %d %s %s %s %v", s.owner, s.key, o.Result, o.Token, o.TTL))
	if o.Result == Granted {
		s.r.grants = append(s.r.grants, detGrant{s.owner, s.key, o.Token})
	}
}

func (r *persistRun) note(op string, owner OwnerID, key string, out Outcome, err error) {
	res := out.Result.String()
	if err != nil {
		res = errName(err, "")
	}
	r.log = append(r.log, fmt.Sprintf("%s %d %s -> %s %s %v", op, owner, key, res, out.Token, out.TTL))
	if err == nil && out.Result == Granted {
		r.grants = append(r.grants, detGrant{owner, key, out.Token})
	}
}

// play runs n random operations from rng starting after *now. Its choices
// depend only on rng and on what the engine answered.
func (r *persistRun) play(t *testing.T, rng *rand.Rand, now *int64, n int) {
	t.Helper()
	e := r.e
	for range n {
		*now += rng.Int64N(300 * int64(time.Millisecond))
		owner := OwnerID(1 + rng.IntN(10))
		k := rng.IntN(20)
		key := fmt.Sprintf("k%02d", k)
		limit := 1
		if k >= 10 {
			limit = 3
		}
		req := AcquireReq{Key: []byte(key), Owner: owner, Limit: limit, Salt: rng.Uint64()}
		if k >= 18 { // read-write keys: odd owners write, even ones read
			req.Mode = ModeRead + Mode(owner%2)
		}
		if rng.IntN(2) == 0 {
			req.TTL = time.Duration(1+rng.IntN(4)) * time.Second
		}
		sink := phaseSink{r: r, phase: r.phase, owner: owner, key: key}
		switch op := rng.IntN(100); {
		case op < 30:
			if rng.IntN(4) > 0 {
				req.Timeout = time.Duration(rng.IntN(3000)) * time.Millisecond
			}
			out, err := e.Acquire(*now, req, sink)
			r.note("acquire", owner, key, out, err)
		case op < 40:
			out, err := e.Enqueue(*now, req)
			r.note("enqueue", owner, key, out, err)
		case op < 48:
			timeout := time.Duration(rng.IntN(2000)) * time.Millisecond
			out, err := e.Wait(*now, req.Key, owner, timeout, sink)
			r.note("wait", owner, key, out, err)
		case op < 68 && len(r.grants) > 0:
			g := r.grants[len(r.grants)-1-rng.IntN(min(len(r.grants), 12))]
			err := e.Release(*now, []byte(g.key), g.tok)
			r.note("release", g.owner, g.key, Outcome{Token: g.tok}, err)
		case op < 76 && len(r.grants) > 0:
			g := r.grants[len(r.grants)-1-rng.IntN(min(len(r.grants), 12))]
			ttl, err := e.RenewAs(*now, []byte(g.key), g.tok, req.TTL, owner) // may move the lease
			r.note("renew", g.owner, g.key, Outcome{Token: g.tok, TTL: ttl}, err)
		case op < 79:
			e.DropOwner(*now, owner)
			r.note("drop", owner, "", Outcome{}, nil)
		case op < 81:
			e.Disconnect(*now, owner, false)
			r.note("keep", owner, "", Outcome{}, nil)
		case op < 84:
			var key uint64 // half keyed (as the REST API opens them), half not
			if rng.IntN(2) == 0 {
				key = rng.Uint64() | 1
			}
			err := e.OpenSessionKeyed(*now, owner, time.Duration(1+rng.IntN(3))*time.Second, 0, key)
			r.note("open", owner, "", Outcome{}, err)
		case op < 86:
			ok := e.BeginSession(*now, owner)
			if rng.IntN(3) > 0 {
				e.EndSession(*now, owner) // else the session stays busy
			}
			r.note(fmt.Sprint("touch ", ok), owner, "", Outcome{}, nil)
		case op < 87:
			ok := e.CloseSession(*now, owner)
			r.note(fmt.Sprint("close ", ok), owner, "", Outcome{}, nil)
		default:
			e.Expire(*now)
			r.note("expire", 0, "", Outcome{}, nil)
		}
	}
}

func writeState(t *testing.T, e *Engine) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := e.WriteState(&buf); err != nil {
		t.Fatalf("WriteState: %v", err)
	}
	return buf.Bytes()
}

func readState(t *testing.T, cfg Config, state []byte) *Engine {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ReadState(bytes.NewReader(state)); err != nil {
		t.Fatalf("ReadState: %v", err)
	}
	return e
}

// TestStateRoundTrip writes the state of engines driven by random
// operations at many points, reads it into a fresh engine, and checks the
// copy dumps the same, keeps every invariant and writes the same bytes.
func TestStateRoundTrip(t *testing.T) {
	cfg := persistConfig()
	var parked, sessions, idle, twoPhase int
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := &persistRun{e: e}
			rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			now := int64(1_700_000_000) * sec
			for round := range 30 {
				r.play(t, rng, &now, 100)
				state := writeState(t, e)
				c := readState(t, cfg, state)
				parked += markParked(c)
				want, got := e.dumpState(), c.dumpState()
				if got != want {
					t.Fatalf("round %d: restored state differs:\n--- original\n%s\n--- restored\n%s", round, want, got)
				}
				if err := c.checkInvariants(); err != nil {
					t.Fatalf("round %d: restored engine: %v", round, err)
				}
				if again := writeState(t, c); !bytes.Equal(again, state) {
					t.Fatalf("round %d: restored engine writes %d other bytes than the %d read", round, len(again), len(state))
				}
				c1, g1 := e.Metrics()
				c2, g2 := c.Metrics()
				if c1 != c2 || g1 != g2 {
					t.Fatalf("round %d: metrics %+v %+v, restored %+v %+v", round, c1, g1, c2, g2)
				}
				if e.NextDeadline() != c.NextDeadline() || e.LastFence() != c.LastFence() {
					t.Fatalf("round %d: next deadline %d fence %d, restored %d %d",
						round, e.NextDeadline(), e.LastFence(), c.NextDeadline(), c.LastFence())
				}
				d := e.dumpState()
				sessions += strings.Count(d, "session ")
				idle += strings.Count(d, "idle=true")
				twoPhase += strings.Count(d, " 2p")
			}
		})
	}
	// The runs must have put every kind of state through the format.
	if parked == 0 || sessions == 0 || idle == 0 || twoPhase == 0 {
		t.Errorf("runs restored %d parked waiters, %d sessions, %d idle keys, %d two-phase entries; want all > 0",
			parked, sessions, idle, twoPhase)
	}
}

// TestStateContinues restores an engine mid-run and plays the same further
// operations on the original and the copy: every answer, every delivery
// to a Sink made after the restore, and the final state must agree.
func TestStateContinues(t *testing.T) {
	cfg := persistConfig()
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			a := &persistRun{e: e}
			rng := rand.New(rand.NewPCG(seed, 7))
			now := int64(1_700_000_000) * sec
			a.play(t, rng, &now, 1500)

			b := &persistRun{e: readState(t, cfg, writeState(t, e))}
			b.grants = append(b.grants, a.grants...)
			a.phase, b.phase = 1, 1
			a.log, b.log = nil, nil
			nowA, nowB := now, now
			a.play(t, rand.New(rand.NewPCG(seed, 8)), &nowA, 1500)
			b.play(t, rand.New(rand.NewPCG(seed, 8)), &nowB, 1500)
			for i := range min(len(a.log), len(b.log)) {
				if a.log[i] != b.log[i] {
					t.Fatalf("entry %d after the restore differs:\n  original %s\n  restored %s", i, a.log[i], b.log[i])
				}
			}
			if len(a.log) != len(b.log) {
				t.Fatalf("logs differ in length: %d and %d", len(a.log), len(b.log))
			}
			markParked(a.e)
			markParked(b.e)
			if da, db := a.e.dumpState(), b.e.dumpState(); da != db {
				t.Fatalf("final states differ:\n--- original\n%s\n--- restored\n%s", da, db)
			}
			if err := b.e.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(a.log, "\n"), "deliver") {
				t.Error("the run after the restore never delivered to a Sink")
			}
		})
	}
}

// TestReadStateRejects feeds ReadState damaged or misfitting states.
func TestReadStateRejects(t *testing.T) {
	cfg := persistConfig()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &persistRun{e: e}
	now := int64(1_700_000_000) * sec
	r.play(t, rand.New(rand.NewPCG(3, 3)), &now, 400)
	good := writeState(t, e)

	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x10
		return b
	}
	badVersion := bytes.Clone(good)
	badVersion[len(stateMagic)] = stateVersion + 1
	tests := []struct {
		name  string
		state []byte
		edit  func(*Config)
		fill  bool // restore into an engine that is not empty
	}{
		{name: "empty input", state: nil},
		{name: "truncated", state: good[:len(good)/2]},
		{name: "bad magic", state: flip(0)},
		{name: "bad version", state: badVersion},
		{name: "flipped body byte", state: flip(len(good) / 2)},
		{name: "flipped checksum", state: flip(len(good) - 1)},
		{name: "other shard count", state: good, edit: func(c *Config) { c.Shards = 16 }},
		{name: "too few max keys", state: good, edit: func(c *Config) { c.MaxKeys = 1 }},
		{name: "engine not empty", state: good, fill: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			if tt.edit != nil {
				tt.edit(&c)
			}
			dst, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			if tt.fill {
				mustGrant(t, dst, 0, AcquireReq{Key: []byte("x"), Owner: 1, Limit: 1})
			}
			err = dst.ReadState(bytes.NewReader(tt.state))
			if !errors.Is(err, ErrBadState) {
				t.Fatalf("ReadState = %v; want ErrBadState", err)
			}
		})
	}
	// Every single flipped bit is caught (by the checksum at least).
	for i := range good {
		dst, _ := New(cfg)
		b := bytes.Clone(good)
		b[i] ^= 1 << (i % 8)
		if err := dst.ReadState(bytes.NewReader(b)); err == nil {
			t.Fatalf("a flipped bit in byte %d of %d went unnoticed", i, len(good))
		}
	}
}

// TestStateStructureChecked re-checksums states whose structure is broken,
// so that only ReadState's own checks can catch them.
func TestStateStructureChecked(t *testing.T) {
	cfg := persistConfig()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustGrant(t, e, 0, AcquireReq{Key: []byte("a"), Owner: 1, Limit: 1})
	if out, err := e.Acquire(0, AcquireReq{Key: []byte("a"), Owner: 2, Limit: 1, Timeout: time.Second}, restoredSink{}); err != nil || out.Result != Queued {
		t.Fatalf("Acquire = %v, %v; want queued", out.Result, err)
	}
	good := writeState(t, e)
	body := good[:len(good)-4]
	reseal := func(b []byte) []byte {
		return binaryAppendCRC(b)
	}
	if !bytes.Equal(reseal(bytes.Clone(body)), good) {
		t.Fatal("reseal does not rebuild the checksum")
	}
	// Cut the body short at every length: each must be refused.
	for n := len(stateMagic) + 1; n < len(body); n++ {
		dst, _ := New(cfg)
		if err := dst.ReadState(bytes.NewReader(reseal(bytes.Clone(body[:n])))); !errors.Is(err, ErrBadState) {
			t.Fatalf("a state cut to %d of %d bytes: ReadState = %v; want ErrBadState", n, len(body), err)
		}
	}
	// Trailing bytes are refused.
	dst, _ := New(cfg)
	if err := dst.ReadState(bytes.NewReader(reseal(append(bytes.Clone(body), 0)))); !errors.Is(err, ErrBadState) {
		t.Fatalf("trailing byte: ReadState = %v; want ErrBadState", err)
	}
}

func binaryAppendCRC(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// TestShiftDeadlines moves a lease, a parked wait, an idle key and a
// session by a positive and a negative delta: each keeps the time it had
// left, measured from the shifted clock.
func TestShiftDeadlines(t *testing.T) {
	for _, delta := range []int64{100 * sec, -7 * sec} {
		t.Run(fmt.Sprint(time.Duration(delta)), func(t *testing.T) {
			e := newTestEngine(t, func(c *Config) { c.GCMaxIdle = 20 * time.Second })
			rec := &recorder{}
			now := 1000 * sec
			lease := mustGrant(t, e, now, AcquireReq{Key: []byte("held"), Owner: 1, Limit: 1, TTL: 10 * time.Second})
			if out, _ := e.Acquire(now, AcquireReq{Key: []byte("held"), Owner: 2, Limit: 1, Timeout: 5 * time.Second}, rec.sink(2, "held")); out.Result != Queued {
				t.Fatalf("Acquire = %v; want queued", out.Result)
			}
			idle := mustGrant(t, e, now, AcquireReq{Key: []byte("idle"), Owner: 3, Limit: 1})
			if err := e.Release(now, []byte("idle"), idle.Token); err != nil {
				t.Fatal(err)
			}
			if err := e.OpenSession(now, 9, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			before := e.NextDeadline()
			e.ShiftDeadlines(delta)
			if got := e.NextDeadline(); got != before+delta {
				t.Fatalf("NextDeadline = %d after the shift; want %d", got, before+delta)
			}
			if dl, _ := e.deadlineOf("held", 1); dl != now+10*sec+delta {
				t.Fatalf("lease deadline %d; want %d", dl, now+10*sec+delta)
			}
			if err := e.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			now += delta // the new leader's clock
			// 4.9 s later the wait still runs; at 5 s it times out.
			e.Expire(now + 5*sec - 1)
			if got := rec.take(); len(got) != 0 {
				t.Fatalf("before the wait's end heard %v", got)
			}
			e.Expire(now + 5*sec)
			if got := rec.take(); len(got) != 1 || got[0].out.Result != TimedOut {
				t.Fatalf("at the wait's end heard %v; want 2:held:timed_out", got)
			}
			if _, err := e.Renew(now+10*sec-1, []byte("held"), lease.Token, 0); err != nil {
				t.Fatalf("Renew just before the shifted lease end: %v", err)
			}
			if e.keyState("idle") != "idle" {
				t.Fatalf("idle key is %s before its GC time", e.keyState("idle"))
			}
			e.Expire(now + 20*sec)
			if e.keyState("idle") != "gone" {
				t.Fatalf("idle key is %s at its GC time; want gone", e.keyState("idle"))
			}
			if _, ok := e.SessionTTL(9); !ok {
				t.Fatal("session ended before its shifted idle TTL")
			}
			e.Expire(now + 31*sec)
			if _, ok := e.SessionTTL(9); ok {
				t.Fatal("session outlived its shifted idle TTL")
			}
		})
	}
}

func TestAddSat(t *testing.T) {
	tests := []struct {
		name     string
		t, delta int64
		want     int64
	}{
		{name: "plain", t: 5, delta: 3, want: 8},
		{name: "negative", t: 5, delta: -8, want: -3},
		{name: "saturate up", t: math.MaxInt64 - 1, delta: 5, want: math.MaxInt64},
		{name: "saturate down", t: math.MinInt64 + 1, delta: -5, want: math.MinInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := addSat(tt.t, tt.delta); got != tt.want {
				t.Fatalf("addSat(%d, %d) = %d; want %d", tt.t, tt.delta, got, tt.want)
			}
		})
	}
}

// TestSessionKey: a session keeps the key it was opened with through a
// reopen without one and through WriteState/ReadState; a state of
// version 1 (no keys) still reads, its sessions keyless.
func TestSessionKey(t *testing.T) {
	cfg := persistConfig()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.OpenSessionKeyed(0, 7, time.Minute, 0, 0xabc); err != nil {
		t.Fatal(err)
	}
	if err := e.OpenSession(sec, 7, time.Minute); err != nil { // a reopen keeps the key
		t.Fatal(err)
	}
	if err := e.OpenSession(0, 8, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		owner OwnerID
		key   uint64
		ok    bool
	}{{7, 0xabc, true}, {8, 0, true}, {9, 0, false}} {
		if key, ok := e.SessionKey(tc.owner); key != tc.key || ok != tc.ok {
			t.Fatalf("SessionKey(%d) = %x, %v; want %x, %v", tc.owner, key, ok, tc.key, tc.ok)
		}
	}
	c := readState(t, cfg, writeState(t, e))
	if key, ok := c.SessionKey(7); key != 0xabc || !ok {
		t.Fatalf("restored SessionKey(7) = %x, %v", key, ok)
	}

	// Version 1 wrote no key: one keyless session makes the two formats
	// differ by that last byte (a 0 uvarint) and the version.
	k, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.OpenSession(0, 8, time.Minute); err != nil {
		t.Fatal(err)
	}
	v3 := writeState(t, k)
	// Version 3 added the lapsed two-phase grants at the end: none is a 0.
	body := v3[:len(v3)-5]
	if v3[len(v3)-5] != 0 {
		t.Fatalf("state ends in lapsed count %x, want 0", v3[len(v3)-5])
	}
	if body[len(body)-1] != 0 {
		t.Fatalf("state ends in %x, want the keyless session's 0", body[len(body)-1])
	}
	v1 := bytes.Clone(body[:len(body)-1])
	v1[len(stateMagic)] = 1
	v1 = binary.BigEndian.AppendUint32(v1, crc32.Checksum(v1, crcTable))
	old := readState(t, cfg, v1)
	if key, ok := old.SessionKey(8); key != 0 || !ok {
		t.Fatalf("SessionKey(8) from a version 1 state = %x, %v", key, ok)
	}
	if got, want := old.dumpState(), k.dumpState(); got != want {
		t.Fatalf("version 1 state restored as\n%s\nwant\n%s", got, want)
	}
}

// BenchmarkWriteState measures a snapshot's copy of 100,000 held locks
// (a cluster's applies wait for it); run with -cpu 1,2 to see the
// shards encoded in parallel.
func BenchmarkWriteState(b *testing.B) {
	e := newTestEngine(b, func(c *Config) { c.MaxKeys = 0 })
	for i := range 100_000 {
		mustGrant(b, e, 0, AcquireReq{Key: []byte("key-" + strconv.Itoa(i)), Owner: OwnerID(i + 1), Limit: 1, TTL: time.Hour})
	}
	var n int
	b.ReportAllocs()
	for b.Loop() {
		var w countingWriter
		if err := e.WriteState(&w); err != nil {
			b.Fatal(err)
		}
		n = int(w)
	}
	b.SetBytes(int64(n))
}

// BenchmarkCaptureLargeState: a capture, finished on one goroutine (as a
// snapshot's writer does), of a million held locks over 200 owners,
// their keys sharing a prefix. At this size the encoding waits on
// memory: the resources, entries and keys are scattered over the heap.
func BenchmarkCaptureLargeState(b *testing.B) {
	e := newTestEngine(b, func(c *Config) { c.MaxKeys, c.MaxKeysPerOwner = 0, 0 })
	for i := range 1_000_000 {
		mustGrant(b, e, 0, AcquireReq{Key: fmt.Appendf(nil, "fill-%07d", i), Owner: OwnerID(1000 + i%200), Limit: 1, TTL: time.Hour})
	}
	var n int
	b.ReportAllocs()
	for b.Loop() {
		n = len(e.CaptureState().Finish(nil))
	}
	b.SetBytes(int64(n))
}

type countingWriter int

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}

// TestCaptureIsTheStateAtItsStart: a capture finished after more
// operations (every kind persistRun plays, and a shift of every deadline)
// writes the bytes the state had when it began; the operations encode
// the shards they change first (lockW). Finish also runs beside them.
func TestCaptureIsTheStateAtItsStart(t *testing.T) {
	cfg := persistConfig()
	cfg.MaxKeys += 2 // the two keys below
	for seed := uint64(1); seed <= 4; seed++ {
		for _, beside := range []bool{false, true} {
			t.Run(fmt.Sprint("seed", seed, "/beside=", beside), func(t *testing.T) {
				e, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				r := &persistRun{e: e}
				rng := rand.New(rand.NewPCG(seed, seed^0x51ed270b27a6c3f1))
				now := int64(1_700_000_000) * sec
				for _, key := range []string{"cancel", "drain"} { // held all along: waits queue behind
					mustGrant(t, e, now, AcquireReq{Key: []byte(key), Owner: 100, Limit: 1, TTL: 24 * time.Hour})
				}
				for round := range 20 {
					r.play(t, rng, &now, 100)
					// A wait for CancelWait, and at the last round one
					// for Drain (persistRun plays neither).
					for _, key := range []string{"cancel", "drain"} {
						if key == "drain" && round != 19 {
							continue
						}
						if out, err := e.Acquire(now, AcquireReq{Key: []byte(key), Owner: 101, Limit: 1, TTL: time.Hour, Timeout: 24 * time.Hour}, &countSink{}); err != nil || out.Result != Queued {
							t.Fatalf("Acquire: %v %v, want queued", out, err)
						}
					}
					want := writeState(t, e)
					c := e.CaptureState()
					var got []byte
					done := make(chan struct{})
					if beside {
						go func() { defer close(done); got = c.Finish(nil) }()
					}
					if round%5 == 2 { // first, while every shard waits
						e.ShiftDeadlines(int64(round) * sec)
					}
					if !e.CancelWait(now, []byte("cancel"), 101) {
						t.Fatal("CancelWait found no wait")
					}
					if round == 19 { // the last: draining refuses new requests
						if e.Drain(now) == 0 {
							t.Fatal("Drain found no wait")
						}
					}
					r.play(t, rng, &now, 100)
					if beside {
						<-done
					} else {
						got = c.Finish(nil)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("round %d: the capture wrote %d bytes other than the %d of the state at its start", round, len(got), len(want))
					}
				}
			})
		}
	}
}

// A change that visits every shard and finds nothing to change in most
// (a disconnect of an owner that holds nothing) leaves those shards to
// the writer: encoding them on the applying goroutine would stall it for
// the whole state.
func TestCaptureLeavesShardsANoOpVisits(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.Shards = 16 })
	mustGrant(t, e, 0, AcquireReq{Key: []byte("held"), Owner: 1, Limit: 1, TTL: time.Minute})
	c := e.CaptureState()
	e.Disconnect(0, 2, true) // owner 2 holds nothing anywhere
	e.DropOwner(0, 3)
	waiting := 0
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		if s.capt == c {
			waiting++
		}
		s.mu.Unlock()
	}
	if waiting != len(e.shards) {
		t.Fatalf("%d of %d shards still wait for the capture after no-op disconnects", waiting, len(e.shards))
	}
	_ = c.Finish(nil)
}
