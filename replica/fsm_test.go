package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

const sec = int64(time.Second)

func TestCommandRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		c    Command
	}{
		{name: "acquire", c: Command{Op: OpAcquire, Now: 1_700_000_000 * sec, Origin: 7, ReqID: 99, Owner: 3,
			Key: []byte("k\n\x00"), Limit: 1, TTL: time.Minute, Timeout: -1, Salt: 1<<64 - 1}},
		{name: "release", c: Command{Op: OpRelease, Now: -5, Key: []byte("a"), Token: fence.Token{Fence: 1 << 40, Salt: 5}}},
		{name: "disconnect", c: Command{Op: OpDisconnect, Owner: 1<<64 - 1, Release: true}},
		{name: "restamp", c: Command{Op: OpRestamp, Now: 1, Key: []byte("n0"), Addr: "10.0.0.1:7000"}},
		{name: "restamp with HTTP address", c: Command{Op: OpRestamp, Now: 1, Key: []byte("n0"), Addr: "10.0.0.1:7000", HTTPAddr: "10.0.0.1:6389"}},
		{name: "restamp with only an HTTP address", c: Command{Op: OpRestamp, Now: 1, Key: []byte("n0"), HTTPAddr: "h:1"}},
		{name: "expire, all zero", c: Command{Op: OpExpire}},
		{name: "restamp with a fence floor", c: Command{Op: OpRestamp, Now: 1, Key: []byte("n0"), Token: fence.Token{Fence: 1 << 61}}},
		{name: "cancel wait", c: Command{Op: OpCancelWait, Now: 1, Owner: 3, Key: []byte("k")}},
		{name: "acquire with a request id", c: Command{Op: OpAcquire, Now: 1, Owner: 3, Key: []byte("k"), Limit: 1,
			ReqKey: []byte("c0ffee.1")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := AppendCommand(nil, &tt.c)
			var got Command
			if err := DecodeCommand(b, &got); err != nil {
				t.Fatalf("DecodeCommand: %v", err)
			}
			if !commandsEqual(got, tt.c) {
				t.Fatalf("DecodeCommand = %+v; want %+v", got, tt.c)
			}
			for n := range len(b) {
				if err := DecodeCommand(b[:n], &got); !errors.Is(err, ErrBadCommand) {
					t.Fatalf("a %d-byte prefix of %d decoded: %v", n, len(b), err)
				}
			}
			if err := DecodeCommand(append(b, 0), &got); !errors.Is(err, ErrBadCommand) {
				t.Fatalf("a trailing byte decoded: %v", err)
			}
		})
	}
	for _, bad := range [][]byte{{2, 1, 0}, {1, 0, 0}, {1, byte(opEnd), 0}, {1, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02}} {
		var c Command
		if err := DecodeCommand(bad, &c); !errors.Is(err, ErrBadCommand) {
			t.Errorf("DecodeCommand(%x) = %v; want ErrBadCommand", bad, err)
		}
	}
}

func commandsEqual(a, b Command) bool {
	return a.Op == b.Op && a.Now == b.Now && a.Origin == b.Origin && a.ReqID == b.ReqID &&
		a.Owner == b.Owner && bytes.Equal(a.Key, b.Key) && a.Limit == b.Limit && a.TTL == b.TTL &&
		a.Timeout == b.Timeout && a.Salt == b.Salt && a.Token == b.Token && a.Release == b.Release && a.Addr == b.Addr &&
		a.HTTPAddr == b.HTTPAddr && bytes.Equal(a.ReqKey, b.ReqKey)
}

// TestCommandWithoutHTTPAddr: an entry written before Command.HTTPAddr
// existed (a version-1 Restamp with a client address last) still decodes,
// and a Restamp without an HTTP address encodes to those same bytes.
func TestCommandWithoutHTTPAddr(t *testing.T) {
	// version 1, op restamp, mask fNow|fKey|fAddr, now 1 (zig-zag 2),
	// key "n0", addr "c:1": as written before the field was added.
	old := binary.AppendUvarint([]byte{1, byte(OpRestamp)}, 1<<fNow|1<<fKey|1<<fAddr)
	hdr := len(old)
	old = append(old, 2, 2, 'n', '0', 3, 'c', ':', '1')
	var c Command
	if err := DecodeCommand(old, &c); err != nil {
		t.Fatalf("DecodeCommand(old restamp) = %v", err)
	}
	if c.Op != OpRestamp || c.Now != 1 || string(c.Key) != "n0" || c.Addr != "c:1" || c.HTTPAddr != "" {
		t.Fatalf("old restamp decoded to %+v", c)
	}
	if again := AppendCommand(nil, &c); !bytes.Equal(again, old) {
		t.Fatalf("re-encoded to %x; want %x", again, old)
	}
	c.HTTPAddr = "h:2"
	withHTTP := AppendCommand(nil, &c)
	if !bytes.HasPrefix(withHTTP[hdr:], old[hdr:]) || len(withHTTP) != len(old)+4 {
		t.Fatalf("HTTPAddr is not a trailing field: %x vs %x", withHTTP, old)
	}
}

// FuzzDecodeCommand: whatever decodes re-encodes to the same bytes.
func FuzzDecodeCommand(f *testing.F) {
	f.Add(AppendCommand(nil, &Command{Op: OpAcquire, Now: 5, Key: []byte("k"), Limit: 1, Salt: 9}))
	f.Add(AppendCommand(nil, &Command{Op: OpRenew, Token: fence.Token{Fence: 3, Salt: 4}, TTL: time.Second}))
	f.Add(AppendCommand(nil, &Command{Op: OpRestamp, Now: 1, Key: []byte("n1"), Addr: "c:1", HTTPAddr: "h:1"}))
	f.Add(AppendCommand(nil, &Command{Op: OpAcquire, Now: 5, Owner: 2, Key: []byte("k"), Limit: 1, ReqKey: []byte("c0ffee.1")}))
	f.Fuzz(func(t *testing.T, in []byte) {
		var c Command
		if DecodeCommand(in, &c) != nil {
			return
		}
		if again := AppendCommand(nil, &c); !bytes.Equal(again, in) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", in, c, again)
		}
	})
}

// fsmApply applies c to f as log entry index and returns its Reply.
func fsmApply(t *testing.T, f *FSM, index uint64, c Command) Reply {
	t.Helper()
	r, ok := f.applyEntry(index, AppendCommand(nil, &c)).(Reply)
	if !ok {
		t.Fatalf("Apply(%v) returned no Reply", c.Op)
	}
	return r
}

func newTestFSM(t *testing.T, origin uint64) *FSM {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.Shards = 4
	f, err := NewFSM(cfg, origin)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRestampKeepsRemaining: a new leader's Restamp leaves each lease the
// time it had left at the last applied command, from the new clock on,
// whether that clock is ahead of the old leader's or behind it.
func TestRestampKeepsRemaining(t *testing.T) {
	f := newTestFSM(t, 1)
	r := fsmApply(t, f, 1, Command{Op: OpAcquire, Now: 100 * sec, Owner: 1, Key: []byte("a"), Limit: 1, TTL: 10 * time.Second, Salt: 1})
	if r.Err != nil || r.Outcome.Result != engine.Granted {
		t.Fatalf("Acquire = %+v", r)
	}
	fsmApply(t, f, 2, Command{Op: OpExpire, Now: 104 * sec}) // the last command the old leader stamped
	left := func(now int64) float64 {
		t.Helper()
		l, ok := lockHolderE(f.Engine(), "a", now)
		if !ok {
			t.Fatalf("lock a not held at %d", now)
		}
		return l.LeaseExpiresInS
	}
	if got := left(104 * sec); got != 6 {
		t.Fatalf("before the failover %vs left; want 6", got)
	}
	fsmApply(t, f, 3, Command{Op: OpRestamp, Now: 500 * sec, Key: []byte("n1"), Addr: "c1"})
	if got := left(500 * sec); got != 6 {
		t.Fatalf("after a restamp ahead %vs left at the new clock; want 6", got)
	}
	fsmApply(t, f, 4, Command{Op: OpRestamp, Now: 50 * sec, Key: []byte("n2"), Addr: "c2"})
	if got := left(50 * sec); got != 6 {
		t.Fatalf("after a restamp behind %vs left at the new clock; want 6", got)
	}
	if f.LeaderClientAddr("n1") != "c1" || f.LeaderClientAddr("n2") != "c2" {
		t.Fatalf("leader addresses %q %q; want c1 c2", f.LeaderClientAddr("n1"), f.LeaderClientAddr("n2"))
	}
	// Time never runs backwards: a command stamped before the last applied
	// now is applied at the last applied now.
	fsmApply(t, f, 5, Command{Op: OpExpire, Now: 10 * sec})
	if got := left(50 * sec); got != 6 {
		t.Fatalf("an expire stamped in the past changed the lease: %vs left", got)
	}
	fsmApply(t, f, 6, Command{Op: OpExpire, Now: 56 * sec})
	if _, ok := lockHolderE(f.Engine(), "a", 56*sec); ok {
		t.Fatal("lease outlived its restamped deadline")
	}
}

func lockHolderE(e *engine.Engine, key string, now int64) (engine.LockStat, bool) {
	for _, l := range e.Snapshot(now).Locks {
		if l.Key == key {
			return l, true
		}
	}
	return engine.LockStat{}, false
}

// TestFSMSinkRouting: a parked request gets its Sink only on the node that
// proposed it (its Origin); elsewhere it is applied with none.
func TestFSMSinkRouting(t *testing.T) {
	local, other := newTestFSM(t, 11), newTestFSM(t, 22)
	s := newChanSink()
	local.register(5, s)
	otherSink := newChanSink()
	other.register(5, otherSink) // same ReqID, another origin's
	cmds := []Command{
		{Op: OpAcquire, Now: sec, Origin: 11, ReqID: 4, Owner: 1, Key: []byte("a"), Limit: 1, Salt: 1},
		{Op: OpAcquire, Now: sec, Origin: 11, ReqID: 5, Owner: 2, Key: []byte("a"), Limit: 1, Timeout: time.Minute, Salt: 2},
	}
	for i, c := range cmds {
		for _, f := range []*FSM{local, other} {
			fsmApply(t, f, uint64(i+1), c)
		}
	}
	tok := fence.Token{Fence: 1, Salt: 1}
	for _, f := range []*FSM{local, other} {
		if r := fsmApply(t, f, 3, Command{Op: OpRelease, Now: 2 * sec, Key: []byte("a"), Token: tok}); r.Err != nil {
			t.Fatalf("Release: %v", r.Err)
		}
	}
	if got := s.wait(t, time.Second); got.Result != engine.Granted || got.Token.Salt != 2 {
		t.Fatalf("local sink heard %+v; want granted with salt 2", got)
	}
	select {
	case o := <-otherSink:
		t.Fatalf("another origin's sink heard %+v", o)
	default:
	}
	var a, b bytes.Buffer
	if _, err := local.WriteState(&a); err != nil {
		t.Fatal(err)
	}
	if _, err := other.WriteState(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("the two FSMs hold different states")
	}
}

// TestFSMSnapshotRestore: Restore rebuilds the same state, and a request
// this node had parked hears Canceled.
func TestFSMSnapshotRestore(t *testing.T) {
	src := newTestFSM(t, 1)
	fsmApply(t, src, 1, Command{Op: OpAcquire, Now: sec, Owner: 1, Key: []byte("a"), Limit: 1, Salt: 1})
	fsmApply(t, src, 2, Command{Op: OpAcquire, Now: sec, Owner: 2, Key: []byte("a"), Limit: 1, Timeout: time.Minute, Salt: 2})
	fsmApply(t, src, 3, Command{Op: OpOpenSession, Now: 2 * sec, Owner: 9, TTL: time.Minute})
	fsmApply(t, src, 4, Command{Op: OpRestamp, Now: 3 * sec, Key: []byte("n0"), Addr: "c0", HTTPAddr: "h0"})
	state := src.appendState(nil)

	dst := newTestFSM(t, 2)
	parked := newChanSink()
	dst.register(77, parked)
	if err := dst.Restore(state); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := parked.wait(t, time.Second); got.Result != engine.Canceled {
		t.Fatalf("a pending sink heard %v on restore; want canceled", got.Result)
	}
	var a, b bytes.Buffer
	ia, _ := src.WriteState(&a)
	ib, _ := dst.WriteState(&b)
	if ia != ib || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("restored FSM at index %d differs from the source at %d", ib, ia)
	}
	if dst.LeaderClientAddr("n0") != "c0" || dst.LeaderHTTPAddr("n0") != "h0" || dst.Restores() != 1 {
		t.Fatalf("restored leader addresses %q %q, restores %d", dst.LeaderClientAddr("n0"), dst.LeaderHTTPAddr("n0"), dst.Restores())
	}
	if v := state[len(snapMagic)]; v != snapVersionV2 {
		t.Fatalf("snapshot with an HTTP address has version %d; want %d", v, snapVersionV2)
	}
	// Both continue alike.
	for _, f := range []*FSM{src, dst} {
		fsmApply(t, f, 5, Command{Op: OpRelease, Now: 4 * sec, Key: []byte("a"), Token: fence.Token{Fence: 1, Salt: 1}})
	}
	a.Reset()
	b.Reset()
	_, _ = src.WriteState(&a)
	_, _ = dst.WriteState(&b)
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("source and restored FSM differ after one more command")
	}

	bad := bytes.Clone(state)
	bad[len(bad)-1] ^= 1
	if err := newTestFSM(t, 3).Restore(bad); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("Restore of a damaged snapshot = %v; want ErrBadSnapshot", err)
	}
}

// TestFSMSnapshotVersions: while no leader has announced a REST address
// the snapshot header is version 1 (what nodes without REST addresses
// wrote and read); once one has, version 2 carries them. Both restore.
func TestFSMSnapshotVersions(t *testing.T) {
	snapshot := func(f *FSM) []byte {
		t.Helper()
		return f.appendState(nil)
	}
	src := newTestFSM(t, 1)
	fsmApply(t, src, 1, Command{Op: OpRestamp, Now: sec, Key: []byte("n1"), Addr: "c1"})
	v1 := snapshot(src)
	if v := v1[len(snapMagic)]; v != snapVersion {
		t.Fatalf("snapshot without HTTP addresses has version %d; want %d", v, snapVersion)
	}
	fsmApply(t, src, 2, Command{Op: OpRestamp, Now: 2 * sec, Key: []byte("n2"), Addr: "c2", HTTPAddr: "h2"})
	v2 := snapshot(src)
	if v := v2[len(snapMagic)]; v != snapVersionV2 {
		t.Fatalf("snapshot with an HTTP address has version %d; want %d", v, snapVersionV2)
	}
	dst := newTestFSM(t, 2)
	if err := dst.Restore(v1); err != nil {
		t.Fatalf("Restore(version 1): %v", err)
	}
	if dst.LeaderClientAddr("n1") != "c1" || dst.LeaderHTTPAddr("n1") != "" || dst.LeaderClientAddr("n2") != "" {
		t.Fatalf("version 1 restored n1 %q %q, n2 %q", dst.LeaderClientAddr("n1"), dst.LeaderHTTPAddr("n1"), dst.LeaderClientAddr("n2"))
	}
	if err := dst.Restore(v2); err != nil {
		t.Fatalf("Restore(version 2): %v", err)
	}
	if dst.LeaderClientAddr("n1") != "c1" || dst.LeaderHTTPAddr("n1") != "" ||
		dst.LeaderClientAddr("n2") != "c2" || dst.LeaderHTTPAddr("n2") != "h2" {
		t.Fatalf("version 2 restored n1 %q %q, n2 %q %q", dst.LeaderClientAddr("n1"), dst.LeaderHTTPAddr("n1"),
			dst.LeaderClientAddr("n2"), dst.LeaderHTTPAddr("n2"))
	}
	bad := bytes.Clone(v2)
	bad[len(snapMagic)] = snapVersionV2 + 1
	if err := newTestFSM(t, 3).Restore(bad); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("Restore of an unknown version = %v; want ErrBadSnapshot", err)
	}
}

func TestConfigValidate(t *testing.T) {
	base := testConfig("n0")
	tests := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{name: "defaults with an ID", edit: func(*Config) {}, ok: true},
		{name: "no ID", edit: func(c *Config) { c.NodeID = "" }},
		{name: "election timeout too short", edit: func(c *Config) { c.ElectionTimeout = time.Millisecond }},
		{name: "no snapshot threshold", edit: func(c *Config) { c.SnapshotThreshold = 0 }},
		{name: "fence limit", edit: func(c *Config) { c.Engine.FenceLimit = 5 }},
		{name: "bad log level", edit: func(c *Config) { c.RaftLogLevel = "loud" }},
		{name: "bootstrap without self", edit: func(c *Config) { c.Bootstrap = true; c.Peers = []Peer{{ID: "x", RaftAddr: "a"}} }},
		{name: "bootstrap with self", edit: func(c *Config) { c.Bootstrap = true; c.Peers = []Peer{{ID: "n0", RaftAddr: "a"}} }, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			if err := c.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v; want ok=%v", err, tt.ok)
			}
		})
	}
}

// TestRestampIdlesSessions: a REST request that began on the old leader
// never ends (its EndSession died with it); the new leader's restamp makes
// its session idle, so it expires a TTL later instead of never.
func TestRestampIdlesSessions(t *testing.T) {
	f := newTestFSM(t, 1)
	owner := engine.OwnerID(1<<63 | 5)
	fsmApply(t, f, 1, Command{Op: OpOpenSession, Now: 100 * sec, Owner: owner, TTL: 10 * time.Second, Salt: 0xbeef})
	if r := fsmApply(t, f, 2, Command{Op: OpBeginSession, Now: 101 * sec, Owner: owner}); !r.OK {
		t.Fatal("BeginSession failed")
	}
	fsmApply(t, f, 3, Command{Op: OpExpire, Now: 200 * sec}) // busy: never expires
	if _, ok := f.Engine().SessionTTL(owner); !ok {
		t.Fatal("a busy session expired")
	}
	fsmApply(t, f, 4, Command{Op: OpRestamp, Now: 300 * sec, Key: []byte("n2"), Addr: "c2"})
	fsmApply(t, f, 5, Command{Op: OpExpire, Now: 309 * sec}) // within the TTL restarted at 300
	if key, ok := f.Engine().SessionKey(owner); !ok || key != 0xbeef {
		t.Fatalf("session gone (or key %x) before its TTL ran from the restamp", key)
	}
	fsmApply(t, f, 6, Command{Op: OpExpire, Now: 311 * sec})
	if _, ok := f.Engine().SessionTTL(owner); ok {
		t.Fatal("the session of a request lost in the failover never expired")
	}
}

// Restores returns how many snapshots this FSM has restored.
func (f *FSM) Restores() int64 { return f.restores.Load() }
