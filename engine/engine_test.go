package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/latchd/latchd/fence"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr bool
	}{
		{name: "default", edit: func(*Config) {}},
		{name: "one shard", edit: func(c *Config) { c.Shards = 1 }},
		{name: "no caps", edit: func(c *Config) { c.MaxKeys, c.MaxWaiters, c.GCMaxIdle = 0, 0, 0 }},
		{name: "zero shards", edit: func(c *Config) { c.Shards = 0 }, wantErr: true},
		{name: "shards not power of two", edit: func(c *Config) { c.Shards = 6 }, wantErr: true},
		{name: "negative max keys", edit: func(c *Config) { c.MaxKeys = -1 }, wantErr: true},
		{name: "negative max waiters", edit: func(c *Config) { c.MaxWaiters = -1 }, wantErr: true},
		{name: "zero default TTL", edit: func(c *Config) { c.DefaultTTL = 0 }, wantErr: true},
		{name: "negative GC idle", edit: func(c *Config) { c.GCMaxIdle = -time.Second }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.edit(&cfg)
			err := cfg.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate(%+v) = %v; want error %v", cfg, err, tt.wantErr)
			}
			if _, nerr := New(cfg); (nerr != nil) != tt.wantErr {
				t.Fatalf("New(%+v) = %v; want error %v", cfg, nerr, tt.wantErr)
			}
		})
	}
}

func TestBadRequest(t *testing.T) {
	e := newTestEngine(t, nil)
	tests := []struct {
		name string
		req  AcquireReq
	}{
		{name: "empty key", req: AcquireReq{Owner: 1, Limit: 1}},
		{name: "limit 0", req: AcquireReq{Key: []byte("k"), Owner: 1}},
		{name: "negative TTL", req: AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1, TTL: -time.Second}},
		{name: "negative timeout", req: AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1, Timeout: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := e.Acquire(0, tt.req, nil); !errors.Is(err, ErrBadRequest) {
				t.Errorf("Acquire = %v; want ErrBadRequest", err)
			}
			if tt.req.Timeout == 0 {
				if _, err := e.Enqueue(0, tt.req); !errors.Is(err, ErrBadRequest) {
					t.Errorf("Enqueue = %v; want ErrBadRequest", err)
				}
			}
		})
	}
	if _, err := e.Wait(0, []byte("k"), 1, -time.Second, nil); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Wait(negative timeout) = %v; want ErrBadRequest", err)
	}
	if _, err := e.Renew(0, []byte("k"), fence.Token{Fence: 1}, -time.Second); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Renew(negative TTL) = %v; want ErrBadRequest", err)
	}
	if _, g := e.Metrics(); g.Keys != 0 {
		t.Errorf("bad requests left %d keys", g.Keys)
	}
}

// TestFIFOHandOff queues ten waiters on one lock: each release grants
// exactly the oldest remaining one, and fence numbers strictly increase.
func TestFIFOHandOff(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.FenceSeed = 1000 })
	var rec recorder
	key := []byte("fifo")
	first := mustGrant(t, e, 0, AcquireReq{Key: key, Owner: 1, Limit: 1, Salt: 7})
	if first.Token != (fence.Token{Fence: 1001, Salt: 7}) {
		t.Fatalf("first token = %+v; want fence 1001 (seed+1), salt 7", first.Token)
	}
	if first.TTL != DefaultConfig().DefaultTTL {
		t.Fatalf("TTL = %v; want the default %v", first.TTL, DefaultConfig().DefaultTTL)
	}
	for o := OwnerID(2); o <= 11; o++ {
		out, err := e.Acquire(int64(o)*sec, AcquireReq{Key: key, Owner: o, Limit: 1, Timeout: time.Hour, Salt: uint64(o)}, rec.sink(o, "fifo"))
		if err != nil || out.Result != Queued {
			t.Fatalf("owner %d: Acquire = %v, %v; want queued", o, out.Result, err)
		}
	}
	tok := first.Token
	for o := OwnerID(2); o <= 11; o++ {
		now := 12*sec + int64(o)*sec // within every lease
		if err := e.Release(now, key, tok); err != nil {
			t.Fatalf("release before owner %d: %v", o, err)
		}
		got := rec.take()
		if len(got) != 1 || got[0].owner != o || got[0].out.Result != Granted {
			t.Fatalf("release granted %v; want exactly owner %d", got, o)
		}
		next := got[0].out.Token
		if next.Fence <= tok.Fence || next.Salt != uint64(o) {
			t.Fatalf("owner %d token %+v after %+v; want a larger fence and salt %d", o, next, tok, o)
		}
		if d, _ := e.deadlineOf("fifo", o); d != now+int64(DefaultConfig().DefaultTTL) {
			t.Fatalf("owner %d lease ends %d; want grant time %d + TTL", o, d, now)
		}
		tok = next
	}
	if err := e.Release(30*sec, key, tok); err != nil {
		t.Fatal(err)
	}
	if got := e.keyState("fifo"); got != "idle" {
		t.Fatalf("state after the last release = %q; want idle", got)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("last release delivered %v", got)
	}
}

// TestFenceAcrossKeys checks fence numbers rise across all keys, and that
// a key collected and created again still gets larger ones.
func TestFenceAcrossKeys(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.GCMaxIdle = time.Second })
	var last uint64
	for i, k := range []string{"a", "b", "a", "c", "b"} {
		out := mustGrant(t, e, int64(i)*sec, AcquireReq{Key: []byte(k), Owner: 1, Limit: 3})
		if out.Token.Fence <= last {
			t.Fatalf("grant %d on %q: fence %d after %d", i, k, out.Token.Fence, last)
		}
		last = out.Token.Fence
		e.DropOwner(int64(i)*sec, 1)
		e.Expire(int64(i+10) * sec)
		if got := e.keyState(k); got != "gone" {
			t.Fatalf("%q after GC = %q; want gone", k, got)
		}
	}
	if e.LastFence() != last {
		t.Fatalf("LastFence = %d; want %d", e.LastFence(), last)
	}
}

func TestSnapshot(t *testing.T) {
	e := newTestEngine(t, nil)
	now := 1000 * sec
	lock := mustGrant(t, e, now, AcquireReq{Key: []byte("lock"), Owner: 7, Limit: 1, TTL: 10 * time.Second})
	if _, err := e.Acquire(now, AcquireReq{Key: []byte("lock"), Owner: 8, Limit: 1, Timeout: time.Hour}, discard{}); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, e, now, AcquireReq{Key: []byte("sem"), Owner: 7, Limit: 4, TTL: time.Hour})
	mustGrant(t, e, now, AcquireReq{Key: []byte("sem"), Owner: 8, Limit: 4, TTL: time.Hour})
	idleL := mustGrant(t, e, now, AcquireReq{Key: []byte("idle-l"), Owner: 7, Limit: 1})
	idleS := mustGrant(t, e, now, AcquireReq{Key: []byte("idle-s"), Owner: 7, Limit: 2})
	if err := e.Release(now, []byte("idle-l"), idleL.Token); err != nil {
		t.Fatal(err)
	}
	if err := e.Release(now+sec, []byte("idle-s"), idleS.Token); err != nil {
		t.Fatal(err)
	}
	_ = lock
	st := e.Snapshot(now + 2500*int64(time.Millisecond))
	wantLocks := []LockStat{{Key: "lock", OwnerConnID: 7, OwnerConnIDStr: "7", LeaseExpiresInS: 7.5, Waiters: 1}}
	wantSems := []SemaphoreStat{{Key: "sem", Limit: 4, Holders: 2}}
	wantIdleL := []IdleStat{{Key: "idle-l", IdleS: 2.5}}
	wantIdleS := []IdleStat{{Key: "idle-s", IdleS: 1.5}}
	if !slices.Equal(st.Locks, wantLocks) {
		t.Errorf("Locks = %+v; want %+v", st.Locks, wantLocks)
	}
	if !slices.Equal(st.Semaphores, wantSems) {
		t.Errorf("Semaphores = %+v; want %+v", st.Semaphores, wantSems)
	}
	if !slices.Equal(st.IdleLocks, wantIdleL) {
		t.Errorf("IdleLocks = %+v; want %+v", st.IdleLocks, wantIdleL)
	}
	if !slices.Equal(st.IdleSemaphores, wantIdleS) {
		t.Errorf("IdleSemaphores = %+v; want %+v", st.IdleSemaphores, wantIdleS)
	}
	// GC removes the idle keys from the snapshot after GCMaxIdle.
	e.Expire(now + sec + int64(DefaultConfig().GCMaxIdle))
	st = e.Snapshot(now + 100*sec)
	if len(st.IdleLocks) != 0 || len(st.IdleSemaphores) != 0 {
		t.Errorf("after GC idle = %+v, %+v; want none", st.IdleLocks, st.IdleSemaphores)
	}
	if len(st.Locks) != 1 || len(st.Semaphores) != 1 {
		t.Errorf("after GC busy keys = %+v, %+v; want them kept", st.Locks, st.Semaphores)
	}
	// An empty engine reports empty lists, never nil (they are JSON arrays).
	st = newTestEngine(t, nil).Snapshot(0)
	if st.Locks == nil || st.Semaphores == nil || st.IdleLocks == nil || st.IdleSemaphores == nil {
		t.Errorf("empty snapshot has nil lists: %+v", st)
	}
}

// discard is a Sink that ignores outcomes.
type discard struct{}

func (discard) Deliver(Outcome) {}

func TestMetrics(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	k := []byte("k")
	a := mustGrant(t, e, 0, AcquireReq{Key: k, Owner: 1, Limit: 1, TTL: 10 * time.Second})
	if out, _ := e.Acquire(0, AcquireReq{Key: k, Owner: 2, Limit: 1}, nil); out.Result != TimedOut {
		t.Fatalf("try-lock = %v", out.Result)
	}
	if _, err := e.Acquire(0, AcquireReq{Key: k, Owner: 3, Limit: 1, Timeout: time.Minute}, rec.sink(3, "k")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Renew(sec, k, a.Token, 0); err != nil {
		t.Fatal(err)
	}
	c, g := e.Metrics()
	if want := (Counters{Grants: 1, Renewals: 1, Timeouts: 1}); c != want {
		t.Errorf("counters = %+v; want %+v", c, want)
	}
	if want := (Gauges{Keys: 1, Held: 1, Waiting: 1}); g != want {
		t.Errorf("gauges = %+v; want %+v", g, want)
	}
	e.Expire(11 * sec) // the lease ends; owner 3 is granted
	e.DropOwner(12*sec, 3)
	c, g = e.Metrics()
	if want := (Counters{Grants: 2, Renewals: 1, Timeouts: 1, Expiries: 1, Dropped: 1}); c != want {
		t.Errorf("counters = %+v; want %+v", c, want)
	}
	if want := (Gauges{Keys: 1}); g != want {
		t.Errorf("gauges = %+v; want %+v", g, want)
	}
}

func TestNextDeadline(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.GCMaxIdle = 100 * time.Second })
	if got := e.NextDeadline(); got != math.MaxInt64 {
		t.Fatalf("empty engine NextDeadline = %d; want MaxInt64", got)
	}
	out := mustGrant(t, e, 0, AcquireReq{Key: []byte("a"), Owner: 1, Limit: 1, TTL: 50 * time.Second})
	if got := e.NextDeadline(); got != 50*sec {
		t.Fatalf("NextDeadline = %d; want the lease end %d", got, 50*sec)
	}
	if err := e.Release(10*sec, []byte("a"), out.Token); err != nil {
		t.Fatal(err)
	}
	if got := e.NextDeadline(); got != 110*sec {
		t.Fatalf("NextDeadline = %d; want the GC time %d", got, 110*sec)
	}
	e.Expire(110 * sec)
	if got := e.NextDeadline(); got != math.MaxInt64 {
		t.Fatalf("NextDeadline after GC = %d; want MaxInt64", got)
	}
}

func TestSessions(t *testing.T) {
	e := newTestEngine(t, nil)
	var rec recorder
	const ttl = 10 * time.Second
	for _, o := range []OwnerID{1, 2, 3} {
		if err := e.OpenSession(0, o, ttl); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.OpenSession(0, 4, 0); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("OpenSession(ttl 0) = %v; want ErrBadRequest", err)
	}
	if got, ok := e.SessionTTL(1); !ok || got != ttl {
		t.Fatalf("SessionTTL(1) = %v, %v; want %v, true", got, ok, ttl)
	}
	if _, ok := e.SessionTTL(9); ok {
		t.Fatal("SessionTTL of an unknown owner reports ok")
	}
	if e.BeginSession(0, 9) {
		t.Fatal("BeginSession of an unknown session reports true")
	}
	// Session 1 holds a (lease far beyond the session TTL) and session 3
	// waits on it; session 2 is busy with a request in flight.
	mustGrant(t, e, 0, AcquireReq{Key: []byte("a"), Owner: 1, Limit: 1, TTL: time.Hour})
	if _, err := e.Acquire(0, AcquireReq{Key: []byte("a"), Owner: 3, Limit: 1, Timeout: time.Hour}, rec.sink(3, "a")); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, e, 0, AcquireReq{Key: []byte("b"), Owner: 2, Limit: 1, TTL: time.Hour})
	if !e.BeginSession(sec, 2) {
		t.Fatal("BeginSession(2) = false")
	}
	// Session 3 keeps itself alive with requests.
	for now := int64(0); now <= 12*sec; now += sec {
		if !e.BeginSession(now, 3) {
			t.Fatalf("BeginSession(3) at %d = false", now)
		}
		e.EndSession(now, 3)
		e.Expire(now)
		if now < 10*sec && e.keyState("a") != "h=1 w=3" {
			t.Fatalf("at %ds a = %q before session 1's TTL ran out", now/sec, e.keyState("a"))
		}
	}
	// Session 1 went idle at 0 with TTL 10 s: it has expired by now and
	// its lock passed to session 3.
	if got := rec.take(); len(got) != 1 || got[0].owner != 3 || got[0].out.Result != Granted {
		t.Fatalf("after session 1 expired sinks heard %v; want owner 3 granted", got)
	}
	if _, ok := e.SessionTTL(1); ok {
		t.Fatal("session 1 still open after its TTL")
	}
	// Session 2 is busy: it does not expire however long the request runs.
	// Session 3, idle since 12 s, has expired by 100 s.
	e.Expire(100 * sec)
	if _, ok := e.SessionTTL(2); !ok || e.keyState("b") != "h=2" {
		t.Fatalf("busy session 2 expired: b = %q", e.keyState("b"))
	}
	if _, ok := e.SessionTTL(3); ok || e.keyState("a") != "idle" {
		t.Fatalf("idle session 3 kept: open=%v a=%q", ok, e.keyState("a"))
	}
	// Once it ends, its idle TTL restarts from then.
	e.EndSession(100*sec, 2)
	e.Expire(109 * sec)
	if e.keyState("b") != "h=2" {
		t.Fatal("session 2 expired before its TTL after EndSession")
	}
	e.Expire(111 * sec)
	if _, ok := e.SessionTTL(2); ok || e.keyState("b") != "idle" {
		t.Fatalf("session 2 idle past its TTL: open=%v b=%q", ok, e.keyState("b"))
	}
	// CloseSession drops what the session held at once.
	if err := e.OpenSession(120*sec, 5, ttl); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, e, 120*sec, AcquireReq{Key: []byte("c"), Owner: 5, Limit: 1})
	if !e.CloseSession(121*sec, 5) {
		t.Fatal("CloseSession(5) = false")
	}
	if e.keyState("c") != "idle" {
		t.Fatalf("c after CloseSession = %q; want idle", e.keyState("c"))
	}
	if e.CloseSession(121*sec, 5) {
		t.Fatal("second CloseSession(5) = true")
	}
	if _, g := e.Metrics(); g.Sessions != 0 {
		t.Fatalf("Sessions = %d; want 0", g.Sessions)
	}
}

func TestMaxKeysEvictsIdleKeyOfAnotherShard(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxKeys = 2
	cfg.Shards = 64
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Find two keys in different shards, plus a third in a shard of its own.
	keys := []string{}
	seen := map[*shard]bool{}
	for i := 0; len(keys) < 3; i++ {
		k := fmt.Sprintf("key-%d", i)
		if sh := e.shardFor([]byte(k)); !seen[sh] {
			seen[sh] = true
			keys = append(keys, k)
		}
	}
	a, err := e.Acquire(0, AcquireReq{Key: []byte(keys[0]), Owner: 1, Limit: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Release(1, []byte(keys[0]), a.Token); err != nil { // keys[0] is now idle
		t.Fatal(err)
	}
	if _, err := e.Acquire(2, AcquireReq{Key: []byte(keys[1]), Owner: 1, Limit: 1}, nil); err != nil {
		t.Fatal(err)
	}
	out, err := e.Acquire(3, AcquireReq{Key: []byte(keys[2]), Owner: 2, Limit: 1}, nil)
	if err != nil || out.Result != Granted {
		t.Fatalf("third key with an idle key elsewhere: %v, %v; want granted", out, err)
	}
	if _, err := e.Acquire(4, AcquireReq{Key: []byte("one-more"), Owner: 2, Limit: 1}, nil); err != ErrMaxKeys {
		t.Fatalf("fourth key with nothing idle: %v, want ErrMaxKeys", err)
	}
}

// TestWaitCollectsFastPathGrant: a Wait after an Enqueue that was granted
// at once answers that grant (same token, full TTL, lease restarted at
// the wait), once; a Wait for an Acquire grant or a second Wait does not.
func TestWaitCollectsFastPathGrant(t *testing.T) {
	e := newTestEngine(t, nil)
	key := []byte("k")
	en, err := e.Enqueue(0, AcquireReq{Key: key, Owner: 1, Limit: 1, TTL: 10 * time.Second, Salt: 7})
	if err != nil || en.Result != Granted {
		t.Fatalf("Enqueue = %v, %v; want granted", en.Result, err)
	}
	w, err := e.Wait(4*sec, key, 1, 0, nil)
	if err != nil || w.Result != Granted || w.Token != en.Token || w.TTL != 10*time.Second {
		t.Fatalf("Wait = %+v, %v; want granted with %s and TTL 10s", w, err, en.Token)
	}
	if dl, _ := e.deadlineOf("k", 1); dl != 14*sec {
		t.Fatalf("lease deadline after Wait = %d; want %d (restarted at the wait)", dl, 14*sec)
	}
	if c, _ := e.Metrics(); c.Grants != 1 {
		t.Fatalf("grants = %d; want 1 (the wait grants nothing new)", c.Grants)
	}
	if _, err := e.Wait(5*sec, key, 1, time.Second, nil); !errors.Is(err, ErrNotQueued) {
		t.Fatalf("second Wait = %v; want ErrNotQueued", err)
	}
	if err := e.Release(5*sec, key, en.Token); err != nil {
		t.Fatalf("Release of the collected grant: %v", err)
	}

	// An Acquire grant is not an enqueue.
	mustGrant(t, e, 6*sec, AcquireReq{Key: []byte("a"), Owner: 2, Limit: 1})
	if _, err := e.Wait(6*sec, []byte("a"), 2, 0, nil); !errors.Is(err, ErrNotQueued) {
		t.Fatalf("Wait after Acquire = %v; want ErrNotQueued", err)
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestRenewAsMovesTheLease: a lease renewed by token from another owner
// (a client's new connection) moves to it: the old owner's disconnect no
// longer releases it, the new owner's does. A new owner that already
// waits on the key leaves it where it is.
func TestRenewAsMovesTheLease(t *testing.T) {
	e := newTestEngine(t, nil)
	k := []byte("k")
	out, err := e.Acquire(0, AcquireReq{Key: k, Owner: 1, Limit: 1, TTL: time.Minute}, nil)
	if err != nil || out.Result != Granted {
		t.Fatalf("acquire = %v, %v", out.Result, err)
	}
	if _, err := e.RenewAs(sec, k, out.Token, 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	e.DropOwner(2*sec, 1) // the old connection closes
	if _, err := e.Renew(3*sec, k, out.Token, 0); err != nil {
		t.Fatalf("the lease went with its old owner: %v", err)
	}
	e.DropOwner(4*sec, 2)
	if _, err := e.Renew(5*sec, k, out.Token, 0); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("after its new owner dropped, renew = %v; want ErrNotHolder", err)
	}

	// Owner 4 waits on the key held by 3: a renew by 4 leaves 3 holding.
	out, _ = e.Acquire(10*sec, AcquireReq{Key: k, Owner: 3, Limit: 1, TTL: time.Minute}, nil)
	if w, _ := e.Enqueue(10*sec, AcquireReq{Key: k, Owner: 4, Limit: 1, TTL: time.Minute}); w.Result != Queued {
		t.Fatalf("enqueue = %v", w.Result)
	}
	if _, err := e.RenewAs(11*sec, k, out.Token, 0, 4); err != nil {
		t.Fatal(err)
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	e.DropOwner(12*sec, 4)
	if _, err := e.Renew(13*sec, k, out.Token, 0); err != nil {
		t.Fatalf("a renew by a waiter moved the lease to it: %v", err)
	}
}
