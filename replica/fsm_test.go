package replica

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

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
		{name: "expire, all zero", c: Command{Op: OpExpire}},
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
		a.Timeout == b.Timeout && a.Salt == b.Salt && a.Token == b.Token && a.Release == b.Release && a.Addr == b.Addr
}

// FuzzDecodeCommand: whatever decodes re-encodes to the same bytes.
func FuzzDecodeCommand(f *testing.F) {
	f.Add(AppendCommand(nil, &Command{Op: OpAcquire, Now: 5, Key: []byte("k"), Limit: 1, Salt: 9}))
	f.Add(AppendCommand(nil, &Command{Op: OpRenew, Token: fence.Token{Fence: 3, Salt: 4}, TTL: time.Second}))
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
	r, ok := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: AppendCommand(nil, &c)}).(Reply)
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
	fsmApply(t, src, 4, Command{Op: OpRestamp, Now: 3 * sec, Key: []byte("n0"), Addr: "c0"})
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}

	dst := newTestFSM(t, 2)
	parked := newChanSink()
	dst.register(77, parked)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
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
	if dst.LeaderClientAddr("n0") != "c0" || dst.Restores() != 1 {
		t.Fatalf("restored leader address %q, restores %d", dst.LeaderClientAddr("n0"), dst.Restores())
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

	bad := bytes.Clone(sink.Bytes())
	bad[len(bad)-1] ^= 1
	if err := newTestFSM(t, 3).Restore(io.NopCloser(bytes.NewReader(bad))); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("Restore of a damaged snapshot = %v; want ErrBadSnapshot", err)
	}
}

type memSink struct {
	bytes.Buffer
	canceled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.canceled = true; return nil }
func (s *memSink) Close() error  { return nil }

func TestConfigValidate(t *testing.T) {
	base := testConfig("n0")
	tests := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{name: "defaults with an ID", edit: func(*Config) {}, ok: true},
		{name: "no ID", edit: func(c *Config) { c.NodeID = "" }},
		{name: "lease above heartbeat", edit: func(c *Config) { c.LeaderLeaseTimeout = 2 * c.HeartbeatTimeout }},
		{name: "too many append entries", edit: func(c *Config) { c.MaxAppendEntries = 2000 }},
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
