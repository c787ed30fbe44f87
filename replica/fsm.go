package replica

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/engine"
)

// Reply is what applying one Command answered.
type Reply struct {
	Outcome engine.Outcome     // Acquire, Enqueue, Wait
	TTL     time.Duration      // Renew: the lease length
	OK      bool               // BeginSession, CloseSession
	Err     error              // the engine's error, or ErrBadCommand
	Set     *engine.SetOutcome // AcquireSet
}

// FSM is the engine as the raft group's state machine
// (docs/design/replication.md).
//
// Time: an entry applies at max(its leader stamp, the last applied now),
// so the clock never runs backwards. A Restamp (a new leader's first
// entry) shifts every deadline to keep the time it had left on the new
// leader's clock, and raises the fence counter to the floor it carries.
//
// Sinks: an Acquire or Wait that parks gets a Sink only on the node whose
// incarnation (Origin) proposed it, registered under the entry's ReqID.
//
// The Node applies entries and restores snapshots one at a time; the
// other methods are safe for concurrent use.
type FSM struct {
	mu       sync.Mutex // held while applying, snapshotting or reading state
	cfg      engine.Config
	origin   uint64
	eng      atomic.Pointer[engine.Engine]
	lastNow  int64
	dedup    dedup         // recent request ids (dedup.go)
	index    atomic.Uint64 // last applied log index
	restores atomic.Int64  // snapshots restored (tests)

	addrMu  sync.Mutex
	leaders map[string]leaderAddrs // node ID -> its addresses, from Restamp entries

	pendMu  sync.Mutex
	pending map[uint64]engine.Sink // this incarnation's parked requests by ReqID

	fingerprint uint64                 // of cfg's settings (enginecheck.go)
	unlike      atomic.Pointer[string] // the last leader whose settings differ
}

// NewFSM returns an FSM over a new engine built with cfg. origin is the
// local Node's incarnation: Commands carrying it get their Sinks here.
func NewFSM(cfg engine.Config, origin uint64) (*FSM, error) {
	e, err := engine.New(cfg)
	if err != nil {
		return nil, err
	}
	f := &FSM{cfg: cfg, origin: origin, leaders: make(map[string]leaderAddrs), pending: make(map[uint64]engine.Sink),
		fingerprint: engineFingerprint(cfg)}
	f.eng.Store(e)
	return f, nil
}

// Engine returns the current engine, for reads (stats, NextDeadline). It
// must not be mutated outside applyEntry, and a Restore replaces it.
func (f *FSM) Engine() *engine.Engine { return f.eng.Load() }

// AppliedIndex returns the index of the last log entry applied.
func (f *FSM) AppliedIndex() uint64 { return f.index.Load() }

// LeaderClientAddr returns the client address the node id announced when
// it last became leader.
func (f *FSM) LeaderClientAddr(id string) string {
	f.addrMu.Lock()
	defer f.addrMu.Unlock()
	return f.leaders[id].client
}

// LeaderHTTPAddr returns the REST address the node id announced when it
// last became leader ("" if it announced none).
func (f *FSM) LeaderHTTPAddr(id string) string {
	f.addrMu.Lock()
	defer f.addrMu.Unlock()
	return f.leaders[id].http
}

// leaderAddrs is what a leader announced about itself in its Restamp.
type leaderAddrs struct {
	client string // Command.Addr
	http   string // Command.HTTPAddr
}

// WriteState writes the FSM's state (as a snapshot would) and returns the
// index it reflects. Two FSMs at one index write the same bytes.
func (f *FSM) WriteState(w io.Writer) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := w.Write(f.appendLocked(nil))
	return f.index.Load(), err
}

func (f *FSM) register(id uint64, s engine.Sink) {
	f.pendMu.Lock()
	f.pending[id] = s
	f.pendMu.Unlock()
}

func (f *FSM) unregister(id uint64) {
	f.pendMu.Lock()
	delete(f.pending, id)
	f.pendMu.Unlock()
}

// routeSink is the Sink the engine holds for a parked request proposed on
// this node: it hands the Outcome to the caller's Sink, once.
type routeSink struct {
	f  *FSM
	id uint64
}

// Deliver implements engine.Sink. It runs on the goroutine that applies.
func (s *routeSink) Deliver(o engine.Outcome) {
	s.f.pendMu.Lock()
	sink := s.f.pending[s.id]
	delete(s.f.pending, s.id)
	s.f.pendMu.Unlock()
	if sink != nil {
		sink.Deliver(o)
	}
}

// applyEntry applies one log entry's data (a Command or a batch entry) at
// index and returns its Reply (a batchReply for a batch).
func (f *FSM) applyEntry(index uint64, data []byte) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Stored once the entry is applied: a read barrier compares the
	// index with the leader's without the lock, and must not return
	// while the entry's effects are not all in the engine.
	defer f.index.Store(index)
	if len(data) > 0 && data[0] == batchVersion {
		return f.applyBatch(data)
	}
	var c Command
	if err := DecodeCommand(data, &c); err != nil {
		return Reply{Err: err}
	}
	return f.applyCommand(&c)
}

// applyCommand runs c on the engine. Everything it decides depends only on
// c and the state, never on this node's clock or identity, except which
// Sink (local or none) a parked request gets.
func (f *FSM) applyCommand(c *Command) Reply {
	e := f.eng.Load()
	if c.Op == OpRestamp {
		if f.lastNow != 0 {
			e.ShiftDeadlines(c.Now - f.lastNow)
		}
		f.lastNow = c.Now
		e.RaiseFence(c.Token.Fence)
		f.checkEngine(string(c.Key), c.Token.Salt)
		// REST requests in flight died with the old leader; their
		// sessions go idle here, on every replica alike.
		e.IdleSessions(c.Now)
		f.addrMu.Lock()
		f.leaders[string(c.Key)] = leaderAddrs{client: c.Addr, http: c.HTTPAddr}
		f.addrMu.Unlock()
		return Reply{}
	}
	now := max(c.Now, f.lastNow)
	f.lastNow = now
	var sink engine.Sink
	if c.Op.parks() && c.Origin == f.origin && c.Origin != 0 {
		sink = &routeSink{f: f, id: c.ReqID}
	}
	if len(c.ReqKey) > 0 {
		if r, ok := f.applyDedup(e, now, c, sink); ok {
			return r
		}
	}
	r := f.applyOp(e, now, c, sink)
	f.record(c, r)
	return r
}

// applyOp runs c, a client's command, on e at now.
func (f *FSM) applyOp(e *engine.Engine, now int64, c *Command, sink engine.Sink) Reply {
	var r Reply
	switch c.Op {
	case OpAcquire:
		r.Outcome, r.Err = e.Acquire(now, engine.AcquireReq{Key: c.Key, Owner: c.Owner, Limit: c.Limit,
			TTL: c.TTL, Timeout: c.Timeout, Salt: c.Salt, LockDelay: c.LockDelay}, sink)
	case OpEnqueue:
		r.Outcome, r.Err = e.Enqueue(now, engine.AcquireReq{Key: c.Key, Owner: c.Owner, Limit: c.Limit,
			TTL: c.TTL, Salt: c.Salt, LockDelay: c.LockDelay})
	case OpRWAcquire:
		r.Outcome, r.Err = e.Acquire(now, rwReq(c), sink)
	case OpRWEnqueue:
		r.Outcome, r.Err = e.Enqueue(now, rwReq(c))
	case OpWait:
		r.Outcome, r.Err = e.Wait(now, c.Key, c.Owner, c.Timeout, sink)
	case OpRelease:
		r.Err = e.Release(now, c.Key, c.Token)
	case OpRenew:
		r.TTL, r.Err = e.RenewAs(now, c.Key, c.Token, c.TTL, c.Owner)
	case OpDisconnect:
		e.Disconnect(now, c.Owner, c.Release)
	case OpExpire:
		e.Expire(now)
	case OpOpenSession:
		r.Err = e.OpenSessionKeyed(now, c.Owner, c.TTL, 0, c.Salt)
	case OpCloseSession:
		r.OK = e.CloseSession(now, c.Owner)
	case OpBeginSession:
		r.OK = e.BeginSession(now, c.Owner)
	case OpEndSession:
		e.EndSession(now, c.Owner)
	case OpCancelWait:
		r.OK = e.CancelWait(now, c.Key, c.Owner)
	case OpAcquireSet:
		r.Set, r.Err = applyAcquireSet(e, now, c, sink)
	case OpCancelSet:
		r.OK = e.CancelSet(now, c.Key, c.Owner)
	default:
		r.Err = ErrBadCommand
	}
	return r
}

// Snapshot header versions. Version 1 lists each leader's ID and client
// address; version 2 adds its REST address; version 3 adds the window of
// request ids (dedup.go). A snapshot is written as version 1 while no
// leader has announced a REST address and as version 2 while no command
// carried a request id, so clusters that use neither keep writing what
// older nodes read; Restore reads all three.
const (
	snapMagic     = "LTCHFSM"
	snapVersion   = 1
	snapVersionV2 = 2
	snapVersionV3 = 3
)

// appendLocked appends the FSM header and the engine state to b.
func (f *FSM) appendLocked(b []byte) []byte {
	return f.eng.Load().AppendState(f.appendHeaderLocked(b))
}

// appendHeaderLocked appends the FSM header to b.
func (f *FSM) appendHeaderLocked(b []byte) []byte {
	f.addrMu.Lock()
	ids := slices.Sorted(maps.Keys(f.leaders))
	version := byte(snapVersion)
	for _, a := range f.leaders {
		if a.http != "" {
			version = snapVersionV2
		}
	}
	if len(f.dedup.ring) > 0 {
		version = snapVersionV3
	}
	b = append(b, snapMagic...)
	b = append(b, version)
	b = binary.AppendUvarint(b, f.index.Load())
	b = binary.AppendVarint(b, f.lastNow)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = appendString(b, id)
		b = appendString(b, f.leaders[id].client)
		if version >= snapVersionV2 {
			b = appendString(b, f.leaders[id].http)
		}
	}
	f.addrMu.Unlock()
	if version >= snapVersionV3 {
		b = f.dedup.appendTo(b)
	}
	return b
}

// captureState appends the FSM header to b and begins a capture of the
// engine's state (engine.StateCapture), at the index it returns: the
// snapshot's data is what c.Finish appends to the returned b, which it
// may do while later entries apply.
func (f *FSM) captureState(b []byte) ([]byte, uint64, *engine.StateCapture) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b = f.appendHeaderLocked(b)
	return b, f.index.Load(), f.eng.Load().CaptureState()
}

// appendString appends s with its length as a uvarint prefix.
func appendString[S ~string | ~[]byte](b []byte, s S) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Restore replaces the state with the one all holds (as WriteState
// writes it). The requests this node had parked lose their Sinks (the
// restored entries have none): each hears Canceled now, and its entry, if
// still queued, is granted or times out unheard (see engine.ReadState).
func (f *FSM) Restore(all []byte) error {
	e, err := engine.New(f.cfg)
	if err != nil {
		return err
	}
	if len(all) < len(snapMagic)+1 || string(all[:len(snapMagic)]) != snapMagic {
		return ErrBadSnapshot
	}
	version := all[len(snapMagic)]
	if version < snapVersion || version > snapVersionV3 {
		return ErrBadSnapshot
	}
	d := decoder{b: all[len(snapMagic)+1:]}
	index := d.uvarint()
	lastNow := d.varint()
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		return ErrBadSnapshot
	}
	leaders := make(map[string]leaderAddrs, n)
	for range n {
		id := string(d.bytes())
		a := leaderAddrs{client: string(d.bytes())}
		if version >= snapVersionV2 {
			a.http = string(d.bytes())
		}
		leaders[id] = a
	}
	var window dedup
	if version >= snapVersionV3 {
		var ok bool
		if window, ok = readDedup(&d); !ok {
			return ErrBadSnapshot
		}
	}
	if d.bad {
		return ErrBadSnapshot
	}
	if err := e.ReadState(bytes.NewReader(d.b)); err != nil {
		return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	f.mu.Lock()
	f.restores.Add(1)
	// Watchers stay with the node: the new engine publishes to the same
	// Hub, and those watching are told to watch again (they may have
	// missed changes the snapshot folds in).
	hub := f.eng.Load().Hub()
	e.AdoptHub(hub)
	hub.Reset()
	f.eng.Store(e)
	f.index.Store(index)
	f.lastNow = lastNow
	f.dedup = window
	f.addrMu.Lock()
	f.leaders = leaders
	f.addrMu.Unlock()
	f.pendMu.Lock()
	lost := f.pending
	f.pending = make(map[uint64]engine.Sink)
	f.pendMu.Unlock()
	f.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(lost)) {
		lost[id].Deliver(engine.Outcome{Result: engine.Canceled})
	}
	return nil
}

// skipEntry records index as applied for an entry that carries no command
// (an empty entry or a configuration change).
func (f *FSM) skipEntry(index uint64) {
	f.mu.Lock()
	f.index.Store(index)
	f.mu.Unlock()
}

// appendState appends the state as a snapshot holds it to b.
func (f *FSM) appendState(b []byte) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.appendLocked(b)
}
