package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

// applyLoop applies what the apply queue holds when woken (see kickApply).
func (n *Node) applyLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.applyQ.wake:
		}
		n.applyRun.Lock()
		n.applyBatch(n.applyQ.take())
		n.maybeSnapshot(false)
		n.applyRun.Unlock()
	}
}

// applyBatch applies committed entries in order and answers their
// proposers; a MsgSnap from the append thread is a snapshot to restore.
// Under applyRun.
func (n *Node) applyBatch(ms []*raftpb.Message) {
	for _, m := range ms {
		if m == nil { // snapshotNow's marker (tests)
			if ch := n.forceSnap.Swap(nil); ch != nil {
				n.maybeSnapshot(true)
				close(*ch)
			}
			continue
		}
		if m.GetType() == raftpb.MessageType_MsgSnap {
			err := n.restoreSnapshot(m.GetSnapshot())
			if err == nil {
				n.snapIndex = m.GetSnapshot().GetMetadata().GetIndex()
				n.snapBytes.Store(uint64(len(m.GetSnapshot().GetData())))
				n.logBytes = 0
			}
			n.restored <- err
			continue
		}
		for _, e := range m.GetEntries() {
			n.logBytes += uint64(len(e.GetData()))
			n.applyOne(e)
		}
		// The answers first, then raft (which proposes what queued
		// meanwhile): measured, the other order was no faster at 10 or
		// 100 workers and slower at 1. The batch wait starts before the
		// answers leave (etcd_hold.go).
		n.ownerBuf = n.answeredOwners(n.ownerBuf[:0])
		n.startHold(n.ownerBuf)
		n.answerApplied()
		n.step(m.GetResponses()...)
	}
}

// AnswerRunners: this build's Node takes an AnswerRunner.
const AnswerRunners = true

// SetAnswerRunner has r run the answers to applied entries' ProposeFunc
// callbacks instead of the goroutine that applied them; nil puts them
// back on that goroutine. Propose's answers (the REST API's, the leader's
// own restamp and expiry) stay there either way. The server runs them on
// its event loop (server/answers.go). It reports true: this build has
// runners.
func (n *Node) SetAnswerRunner(r AnswerRunner) bool {
	if r == nil {
		n.answerRun.Store(nil)
		return true
	}
	n.answerRun.Store(&r)
	return true
}

// answerApplied answers the proposers of the entries just applied; with
// an AnswerRunner, it hands it the callbacks' answers, in log order.
func (n *Node) answerApplied() {
	if len(n.answers) == 0 {
		return
	}
	r := n.answerRun.Load()
	var later []laterAnswer
	if r != nil {
		k := 0
		for _, a := range n.answers {
			k += len(a.w.batch)
		}
		later = make([]laterAnswer, 0, k)
	}
	for i, a := range n.answers {
		if r != nil {
			n.finishTo(a.w, a.res, nil, &later)
		} else {
			n.finish(a.w, a.res, nil)
		}
		n.answers[i] = pendingAnswer{}
	}
	n.answers = n.answers[:0]
	if len(later) == 0 {
		return
	}
	fn := func() {
		for _, l := range later {
			l.p.answer(l.r, nil)
		}
	}
	if !(*r)(len(later), fn) {
		fn()
	}
}

func (n *Node) applyOne(e *raftpb.Entry) {
	idx := e.GetIndex()
	if idx <= n.fsm.AppliedIndex() {
		return // in the snapshot this node restored
	}
	switch e.GetType() {
	case raftpb.EntryType_EntryNormal:
		data := e.GetData()
		if len(data) == 0 {
			n.fsm.skipEntry(idx)
			return
		}
		n.applyMu.Lock()
		res := n.fsm.applyEntry(idx, data)
		n.applyMu.Unlock()
		origin, key := firstReqID(data)
		if origin != n.origin {
			return
		}
		n.waitMu.Lock()
		w := n.waiters[key]
		delete(n.waiters, key)
		n.waitMu.Unlock()
		if w != nil {
			n.answers = append(n.answers, pendingAnswer{w: w, res: res})
		}
	case raftpb.EntryType_EntryConfChange, raftpb.EntryType_EntryConfChangeV2:
		var cc raftpb.ConfChangeI
		var ctxb []byte
		if e.GetType() == raftpb.EntryType_EntryConfChange {
			c := &raftpb.ConfChange{}
			if proto.Unmarshal(e.GetData(), c) != nil {
				n.fsm.skipEntry(idx)
				return
			}
			cc, ctxb = c, c.GetContext()
		} else {
			c := &raftpb.ConfChangeV2{}
			if proto.Unmarshal(e.GetData(), c) != nil {
				n.fsm.skipEntry(idx)
				return
			}
			cc, ctxb = c, c.GetContext()
		}
		d := decoder{b: ctxb}
		req := d.uvarint()
		name, addr := string(d.bytes()), string(d.bytes())
		v2 := cc.AsV2()
		if !d.bad && name != "" {
			for _, ch := range v2.GetChanges() {
				if ch.GetNodeId() == raftID(name) && ch.GetType() != raftpb.ConfChangeType_ConfChangeRemoveNode {
					n.bookMu.Lock()
					n.book[raftID(name)] = Member{ID: name, RaftAddr: addr, Suffrage: "nonvoter"}
					n.bookMu.Unlock()
					if raftID(name) != n.id {
						n.tr.setPeer(raftID(name), addr)
					}
				}
			}
		}
		var cs *raftpb.ConfState
		_ = n.call(context.Background(), func() { cs = n.rn.ApplyConfChange(cc) })
		n.applyMu.Lock()
		if cs != nil {
			n.setConf(cs)
		}
		n.fsm.skipEntry(idx)
		n.applyMu.Unlock()
		n.waitMu.Lock()
		ch := n.ccWait[req]
		delete(n.ccWait, req)
		n.waitMu.Unlock()
		if ch != nil && !d.bad {
			ch <- nil
		}
	default:
		n.fsm.skipEntry(idx)
	}
}

// setConf records a new configuration: suffrage in the book, streams to
// removed members stopped.
func (n *Node) setConf(cs *raftpb.ConfState) {
	n.bookMu.Lock()
	defer n.bookMu.Unlock()
	n.confState = cs
	in := make(map[uint64]string)
	for _, id := range cs.GetVoters() {
		in[id] = "voter"
	}
	for _, id := range cs.GetVotersOutgoing() {
		if in[id] == "" {
			in[id] = "voter"
		}
	}
	for _, id := range cs.GetLearners() {
		in[id] = "nonvoter"
	}
	for _, id := range cs.GetLearnersNext() {
		if in[id] == "" {
			in[id] = "nonvoter"
		}
	}
	for id, m := range n.book {
		s, ok := in[id]
		if !ok {
			delete(n.book, id)
			if id != n.id {
				n.tr.removePeer(id)
			}
			continue
		}
		m.Suffrage = s
		n.book[id] = m
	}
}

// firstReqID returns the Origin and ReqID of an entry's first command.
func firstReqID(data []byte) (uint64, uint64) {
	var c Command
	if data[0] == batchVersion {
		d := decoder{b: data[1:]}
		if d.uvarint() == 0 || d.bad {
			return 0, 0
		}
		one := d.bytes()
		if d.bad || DecodeCommand(one, &c) != nil {
			return 0, 0
		}
		return c.Origin, c.ReqID
	}
	if DecodeCommand(data, &c) != nil {
		return 0, 0
	}
	return c.Origin, c.ReqID
}

// snapshotDue reports whether a snapshot is due. Under applyRun.
//
// A small state (snapSizeFloor bytes or less) is snapshotted every
// SnapshotThreshold entries. A larger one waits, besides, until the log
// applied since the last snapshot is as large as that snapshot was: a
// snapshot copies the whole state while every apply waits, and at a fixed
// count of entries a large state made copying it the node's main work
// (400,000 held locks, a 29 MB state: p50 16-34 ms and p99 1.6-1.8 s at
// 2,000 ops/s). Tied to the log's growth, copying the state costs about
// what writing the log did. snapMaxSpan thresholds' worth of entries make
// a snapshot due whatever their size: raft's in-memory log keeps every
// entry since the last one (about 130 bytes each besides its data), and
// a state that shrank would otherwise keep the gap its old size set. A
// restart replays at most that gap. Raft asking for a snapshot to send
// that the last one cannot be (snapStorage) makes one due at once; a
// write that failed makes one due at the end of its pause.
func (n *Node) snapshotDue() bool {
	if n.snapWant.Load() {
		return true
	}
	if at := n.snapRetry.Load(); at != 0 {
		return monoNow() >= at // the last write failed: due once its pause is over (writeSnapshot)
	}
	since := n.fsm.AppliedIndex() - min(n.snapIndex, n.fsm.AppliedIndex())
	switch {
	case since < n.cfg.SnapshotThreshold:
		return false
	case since >= snapMaxSpan*n.cfg.SnapshotThreshold:
		return true
	}
	size := n.snapBytes.Load()
	return size <= snapSizeFloor || n.logBytes >= size
}

// snapRetryMin and snapRetryMax bound the pause before a snapshot write
// that failed is tried again: it doubles with each failure in a row.
const (
	snapRetryMin = 50 * time.Millisecond
	snapRetryMax = 5 * time.Second
)

// snapMaxSpan bounds the entries between two snapshots, in
// SnapshotThresholds.
const snapMaxSpan = 16

// snapSizeFloor is the state size up to which snapshots follow
// SnapshotThreshold alone (copying 1 MiB takes a few milliseconds).
var snapSizeFloor uint64 = 1 << 20 // a variable for tests

// maybeSnapshot takes a snapshot when one is due, or at once with force
// (tests). The state is copied here, under applyRun; writing it out and
// compacting the log behind it (keeping TrailingLogs entries for
// followers a little behind) is writeSnapshot's, on a goroutine of its
// own, so the applies go on meanwhile. One write at a time: a snapshot
// due while the last one is still being written waits for a later apply;
// force waits for that write, and for its own.
func (n *Node) maybeSnapshot(force bool) {
	if force {
		n.snapMu.Lock()
	} else if !n.snapshotDue() || !n.snapMu.TryLock() {
		return
	}
	applied := n.fsm.AppliedIndex()
	if li, _ := n.mem.LastIndex(); applied > li {
		n.snapMu.Unlock()
		return // applied before this node's own append finished: next time
	}
	start := time.Now()
	c := n.captureSnapshot()
	n.snapIndex, n.logBytes = c.idx, 0
	n.snapWant.Store(false)
	go n.writeSnapshot(c, time.Since(start)) // unlocks snapMu
	if force {
		n.snapMu.Lock()
		n.snapMu.Unlock()
	}
}

// snapCapture is a snapshot begun on the apply thread and finished by
// writeSnapshot: its members and FSM header, and the engine's capture.
type snapCapture struct {
	idx  uint64
	cs   *raftpb.ConfState
	head []byte
	eng  *engine.StateCapture
}

// captureSnapshot begins a snapshot at the applied index: the members,
// the configuration and the FSM header now, the engine's state shard by
// shard as the applies that follow change it or as the writer finishes
// it (engine.StateCapture). Under applyRun.
func (n *Node) captureSnapshot() *snapCapture {
	n.applyMu.Lock()
	defer n.applyMu.Unlock()
	n.bookMu.Lock()
	head := appendSnapHeader(nil, n.book)
	cs := proto.Clone(n.confState).(*raftpb.ConfState)
	n.bookMu.Unlock()
	head, idx, c := n.fsm.captureState(head)
	n.encoding.Store(true)
	return &snapCapture{idx: idx, cs: cs, head: head, eng: c}
}

// writeSnapshot writes snap durably, compacts the log behind it and
// releases snapMu, which maybeSnapshot took for it.
func (n *Node) writeSnapshot(c *snapCapture, captured time.Duration) {
	failed := false
	defer func() {
		if !failed {
			n.snapPause = 0
			n.snapRetry.Store(0)
			n.snapMu.Unlock()
			return
		}
		// Due again after a pause that doubles with each failure in a
		// row (a full or broken disk would otherwise have every apply
		// copy the state for a write that fails). The wake comes at
		// the pause's end whether or not entries arrive meanwhile, and
		// after snapMu is free, so that it finds it free.
		pause := min(max(2*n.snapPause, snapRetryMin), snapRetryMax)
		n.snapPause = pause
		n.snapRetry.Store(monoNow() + int64(pause))
		n.snapMu.Unlock()
		time.AfterFunc(pause, n.applyQ.signal)
	}()
	start := time.Now()
	data := c.eng.Finish(c.head)
	n.encoding.Store(false)
	encoded := time.Since(start)
	// MemoryStorage gets the snapshot without its state (it would clone
	// the whole of it here, and again for every Snapshot call); the
	// whole one is kept in n.snap for raft to send (snapStorage).
	meta, err := n.mem.CreateSnapshot(c.idx, c.cs, nil)
	var snap *raftpb.Snapshot
	if err == nil {
		snap = &raftpb.Snapshot{Data: data, Metadata: meta.GetMetadata()}
		n.keepSnap(snap)
	} else if errors.Is(err, raft.ErrSnapOutOfDate) {
		// Ours, if a write of this index failed and its retry found no
		// newer entry to take: write it again. Not if a newer one from
		// the leader is being installed (MemoryStorage has it first).
		held, _ := n.mem.Snapshot() // metadata only: cheap
		if own := n.snap.Load(); own != nil && own.GetMetadata().GetIndex() == c.idx && held.GetMetadata().GetIndex() == c.idx {
			snap, err = own, nil
		}
	}
	if err != nil {
		// ErrSnapOutOfDate: a newer snapshot, from the leader, was
		// restored meanwhile.
		n.log.Debug("snapshot dropped", zap.Uint64("index", c.idx), zap.Error(err))
		return
	}
	n.snapBytes.Store(uint64(len(data)))
	n.setWritingSnap(true)
	err = n.st.saveSnapshot(snap, n.cfg.SnapshotRetain)
	n.setWritingSnap(false)
	if err != nil {
		n.log.Warn("snapshot write failed", zap.Error(err))
		n.snapFails.Add(1)
		failed = true
		return
	}
	idx := c.idx
	n.log.Info("snapshot taken", zap.String("node_id", n.cfg.NodeID), zap.Uint64("index", idx),
		zap.Int("bytes", len(data)), zap.Duration("capture", captured), zap.Duration("encode", encoded),
		zap.Duration("write", time.Since(start)-encoded))
	if idx > n.cfg.TrailingLogs {
		to := idx - n.cfg.TrailingLogs
		if first, _ := n.mem.FirstIndex(); to > first {
			_ = n.mem.Compact(to)
			_ = n.st.wal.DeleteRange(0, to)
		}
	}
}

// run restamps on every new leadership and proposes expiry while leader.
func (n *Node) run() {
	defer n.wg.Done()
	tick := time.NewTicker(n.cfg.ExpireEvery)
	defer tick.Stop()
	var stampTerm uint64
	for {
		select {
		case <-n.stop:
			n.setReady(false)
			return
		case <-tick.C:
		}
		lt := n.leadTerm.Load()
		if lt == 0 {
			stampTerm = 0
			n.setReady(false)
			continue
		}
		if stampTerm != lt {
			n.setReady(false)
			c := Command{Op: OpRestamp, Key: []byte(n.cfg.NodeID), Addr: n.cfg.ClientAddr, HTTPAddr: n.cfg.HTTPAddr,
				Token: fence.Token{Fence: max(uint64(max(n.now(), 0)), n.cfg.FenceFloor)}}
			if _, err := n.applyRaw(&c); err != nil || n.leadTerm.Load() != lt {
				continue
			}
			stampTerm = lt
			n.setReady(true)
		}
		if n.fsm.Engine().NextDeadline() <= n.now() {
			c := Command{Op: OpExpire}
			_, _ = n.applyRaw(&c)
		}
	}
}

// applyRaw proposes c as an entry of its own and waits for its Reply.
func (n *Node) applyRaw(c *Command) (Reply, error) {
	c.Origin = n.origin
	c.ReqID = n.seq.Add(1)
	c.Now = n.now()
	p := &proposal{c: *c, raw: true, done: make(chan proposalResult, 1)}
	n.submit(p)
	select {
	case res := <-p.done:
		return res.r, res.err
	case <-n.stop:
		return Reply{}, ErrClosed
	}
}

func (n *Node) isLeaderState() bool {
	return raft.StateType(n.role.Load()) == raft.StateLeader
}

// Propose: see the hashicorp Node's Propose; the contract is the same.
func (n *Node) Propose(ctx context.Context, c Command, sink engine.Sink) (Reply, error) {
	p, err := n.newProposal(ctx, c, sink)
	if err != nil {
		return Reply{}, err
	}
	n.submit(p)
	select {
	case res := <-p.done:
		if res.err != nil {
			return Reply{}, res.err
		}
		return res.r, res.r.Err
	case <-n.stop:
		return Reply{}, ErrClosed
	}
}

// ProposeFunc proposes c like Propose, without blocking: done gets the
// outcome (Propose's Reply and error) exactly once, on one of the node's
// goroutines (usually the apply thread, possibly while raft's lock is
// held) or, for an applied entry, the AnswerRunner's (SetAnswerRunner),
// so it must not block or call back into the node synchronously.
// A leader still taking over (its restamp not applied) answers
// *NotLeaderError at once rather than wait, as does a follower; then done
// is not called. Once Shutdown has begun, a proposal not yet in the log
// or not yet applied hears ErrClosed. Propose costs a goroutine per waiting caller; a server's
// event loop uses this instead and hears the answer with no hop.
func (n *Node) ProposeFunc(c Command, sink engine.Sink, done func(Reply, error)) error {
	p, err := n.newProposal(nil, c, sink)
	if err != nil {
		return err
	}
	p.cb = done
	n.submit(p)
	return nil
}

// FSM returns the node's state machine.
func (n *Node) FSM() *FSM { return n.fsm }

// ID returns the node's ID.
func (n *Node) ID() string { return n.cfg.NodeID }

// IsLeader reports whether this node is the leader and ready for commands.
func (n *Node) IsLeader() bool { return n.isReady.Load() && n.isLeaderState() }

func (n *Node) memberName(id uint64) string {
	n.bookMu.Lock()
	defer n.bookMu.Unlock()
	return n.book[id].ID
}

// Leader returns what this node knows of the leader (empty if none).
func (n *Node) Leader() NotLeaderError {
	lead := n.lead.Load()
	if lead == raft.None {
		return NotLeaderError{}
	}
	n.bookMu.Lock()
	m := n.book[lead]
	n.bookMu.Unlock()
	e := NotLeaderError{LeaderID: m.ID, RaftAddr: m.RaftAddr}
	if e.LeaderID == "" {
		return e
	}
	e.ClientAddr = n.fsm.LeaderClientAddr(e.LeaderID)
	e.HTTPAddr = n.fsm.LeaderHTTPAddr(e.LeaderID)
	if e.HTTPAddr == "" && e.LeaderID == n.cfg.NodeID {
		e.HTTPAddr = n.cfg.HTTPAddr
	}
	if e.ClientAddr == "" {
		for _, p := range n.cfg.Peers {
			if p.ID == e.LeaderID {
				e.ClientAddr = p.ClientAddr
			}
		}
	}
	return e
}

func (n *Node) notLeader() error {
	e := n.Leader()
	return &e
}

// Shutdown stops the node (a leader stops without handing over) and
// closes its storage.
func (n *Node) Shutdown() error {
	n.closeOnce.Do(func() {
		close(n.stop)
		n.wg.Wait()
		n.snapMu.Lock() // a snapshot still being written (writeSnapshot)
		n.snapMu.Unlock()
		n.tr.close()
		n.setReady(false)
		n.waitMu.Lock()
		ws := n.waiters
		n.waiters = make(map[uint64]*waiter)
		n.waitShut = true
		n.waitMu.Unlock()
		for _, w := range ws {
			n.finish(w, nil, ErrClosed)
		}
		// What was still queued (behind the entry in flight, or submitted
		// meanwhile) never reached raft: ProposeFunc's callers hear of it
		// too, as Propose's do through stop.
		n.failQueuedIfStopping()
		if n.st.Close != nil {
			n.closeErr = n.st.Close()
		}
	})
	return n.closeErr
}

// EndSessionAsync proposes engine.EndSession and returns at once.
func (n *Node) EndSessionAsync(owner engine.OwnerID) {
	if !n.isReady.Load() {
		return
	}
	c := Command{Op: OpEndSession, Owner: owner, Now: n.now(), Origin: n.origin, ReqID: n.seq.Add(1)}
	n.submit(&proposal{c: c, done: make(chan proposalResult, 1)})
}

// ErrUnknownServer means a membership operation named a server that is not
// a voter of the current configuration.
var ErrUnknownServer = errors.New("replica: no such voter")

// AddVoter adds the node id, reached at raftAddr, as a voter (an existing
// member's address is updated); it returns once the change is applied here.
func (n *Node) AddVoter(ctx context.Context, id, raftAddr string) error {
	if id == "" || raftAddr == "" {
		return fmt.Errorf("replica: add voter: empty ID or address")
	}
	return n.confChange(ctx, raftpb.ConfChangeType_ConfChangeAddNode, id, raftAddr)
}

// AddLearner adds the node id as a non-voting member: it receives the log
// and can be promoted with AddVoter once caught up, without counting
// toward the quorum meanwhile.
func (n *Node) AddLearner(ctx context.Context, id, raftAddr string) error {
	if id == "" || raftAddr == "" {
		return fmt.Errorf("replica: add learner: empty ID or address")
	}
	return n.confChange(ctx, raftpb.ConfChangeType_ConfChangeAddLearnerNode, id, raftAddr)
}

// RemoveServer removes the node id; removing a non-member is not an error.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("replica: remove server: empty ID")
	}
	n.bookMu.Lock()
	_, ok := n.book[raftID(id)]
	n.bookMu.Unlock()
	if !ok {
		if !n.isLeaderState() {
			return n.notLeader()
		}
		return nil
	}
	return n.confChange(ctx, raftpb.ConfChangeType_ConfChangeRemoveNode, id, "")
}

func (n *Node) confChange(ctx context.Context, typ raftpb.ConfChangeType, id, addr string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !n.isLeaderState() {
		return n.notLeader()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.ApplyTimeout)
		defer cancel()
	}
	req := n.seq.Add(1)
	cctx := appendString(appendString(binary.AppendUvarint(nil, req), id), addr)
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(raftID(id))}}, Context: cctx}
	ch := make(chan error, 1)
	n.waitMu.Lock()
	n.ccWait[req] = ch
	n.waitMu.Unlock()
	defer func() {
		n.waitMu.Lock()
		delete(n.ccWait, req)
		n.waitMu.Unlock()
	}()
	var perr error
	if err := n.call(ctx, func() { perr = n.rn.ProposeConfChange(cc) }); err != nil {
		return err
	}
	if perr != nil {
		return n.notLeader()
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stop:
		return ErrClosed
	}
}

// TransferLeadership hands leadership to voter id, or with "" to the most
// up-to-date other voter, and returns once this node has stepped down.
func (n *Node) TransferLeadership(ctx context.Context, id string) error {
	// raft drops a transfer whose transferee does not campaign within an
	// election timeout: one still applying a configuration change (a
	// node just added or removed) will not campaign yet, nor will one that
	// is slow to catch up on a loaded machine. Try again a few times
	// while ctx allows.
	var err error
	for attempt := 0; attempt < transferAttempts; attempt++ {
		if err = n.transferOnce(ctx, id); !errors.Is(err, errTransferAborted) {
			return err
		}
	}
	return err
}

// transferAttempts bounds TransferLeadership's tries.
const transferAttempts = 3

// errTransferAborted: raft gave up on a transfer; this node still leads.
var errTransferAborted = errors.New("replica: transfer leadership: the transferee did not take over in an election timeout")

// transferOnce asks raft for one leadership transfer and waits for its
// verdict.
func (n *Node) transferOnce(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !n.isLeaderState() {
		return n.notLeader()
	}
	if id == n.cfg.NodeID {
		return fmt.Errorf("%w: %s is this node, the leader", ErrUnknownServer, id)
	}
	var target uint64
	if err := n.call(ctx, func() {
		st := n.rn.Status()
		best := uint64(0)
		for pid, pr := range st.Progress {
			if pid == n.id || pr.IsLearner {
				continue
			}
			if id != "" {
				if pid == raftID(id) {
					target = pid
				}
				continue
			}
			if target == 0 || pr.Match > best {
				target, best = pid, pr.Match
			}
		}
		if target != 0 {
			n.rn.TransferLeader(target)
		}
	}); err != nil {
		return err
	}
	if target == 0 {
		return fmt.Errorf("%w: %s", ErrUnknownServer, id)
	}
	// raft gives up on a transfer after an election timeout; this node
	// then stays leader.
	for {
		var bs raft.BasicStatus
		if err := n.call(ctx, func() { bs = n.rn.BasicStatus() }); err != nil {
			return err
		}
		if bs.RaftState != raft.StateLeader {
			return nil
		}
		if bs.LeadTransferee == 0 {
			return errTransferAborted
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stop:
			return ErrClosed
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Status returns this node's view; see Status.
func (n *Node) Status() Status {
	l := n.Leader()
	li, _ := n.mem.LastIndex()
	st := Status{
		NodeID:           n.cfg.NodeID,
		Role:             roleOf(raft.StateType(n.role.Load())),
		Ready:            n.IsLeader(),
		Term:             n.term.Load(),
		CommitIndex:      n.commit.Load(),
		AppliedIndex:     n.fsm.AppliedIndex(),
		LastLogIndex:     li,
		LeaderID:         l.LeaderID,
		LeaderRaftAddr:   l.RaftAddr,
		LeaderClientAddr: l.ClientAddr,
		LeaderHTTPAddr:   l.HTTPAddr,
		LeaderChanges:    n.leaderChg.Load(),
		Voters:           []Member{},

		ProposedEntries:   n.propEntries.Load(),
		ProposedCommands:  n.propCmds.Load(),
		BatchWaits:        n.holds.Load(),
		BatchWaitTimeouts: n.holdTimeouts.Load(),

		SnapshotWriteFailures: n.snapFails.Load(),
	}
	select {
	case <-n.stop:
		st.Role, st.Ready = "shutdown", false
	default:
	}
	n.bookMu.Lock()
	for _, m := range n.book {
		st.Voters = append(st.Voters, m)
	}
	n.bookMu.Unlock()
	slices.SortFunc(st.Voters, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return st
}

func roleOf(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateFollower:
		return "follower"
	}
	return "candidate"
}

// Ready reports whether this node can serve, for /readyz.
func (n *Node) Ready() error {
	select {
	case <-n.stop:
		return ErrClosed
	default:
	}
	if n.appFailed.Load() {
		// appendFailed: this node's log is no longer written, and the
		// cluster goes on without it; an operator must see it.
		return errors.New("a write of the raft log failed: this node no longer acknowledges entries (see the log; restart it once its disk is fixed)")
	}
	lead := n.lead.Load()
	switch {
	case lead == raft.None:
		return errors.New("no known leader")
	case lead == n.id && !n.IsLeader():
		return errors.New("elected, still taking over")
	}
	if commit, applied := n.commit.Load(), n.fsm.AppliedIndex(); applied+ReadyLag < commit {
		return fmt.Errorf("log not caught up: applied %d of %d committed", applied, commit)
	}
	return nil
}

// HandOff transfers leadership to another voter before this node stops.
func (n *Node) HandOff(timeout time.Duration) {
	if !n.isLeaderState() {
		return
	}
	other := false
	n.bookMu.Lock()
	for id, m := range n.book {
		other = other || (id != n.id && m.Suffrage == "voter")
	}
	n.bookMu.Unlock()
	if !other {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	if err := n.TransferLeadership(ctx, ""); err != nil {
		n.log.Warn("leadership not handed off before stopping", zap.String("node_id", n.cfg.NodeID), zap.Error(err))
		return
	}
	n.log.Info("leadership handed off before stopping", zap.String("node_id", n.cfg.NodeID),
		zap.Duration("took", time.Since(start)))
}

// snapStorage is the MemoryStorage raft reads, except for the snapshot it
// sends a follower. That one is the node's own (MemoryStorage holds only
// its metadata: see memSnapshot), and it must name the cluster's current
// configuration: an older one may predate the follower's own membership,
// and a node refuses a snapshot whose configuration does not name it.
type snapStorage struct {
	*raft.MemoryStorage
	n *Node
}

// Snapshot implements raft.Storage. It runs on raft's goroutine, so it
// never copies the state itself (a large state would stall raft, its
// heartbeats included, for as long as the copy takes): it returns the
// last snapshot taken when that one carries the current configuration,
// and otherwise asks the apply thread for a fresh one and reports it
// temporarily unavailable, which has raft ask again later.
//
// The snapshot is n.snap itself, not a copy: nothing changes a snapshot
// once it is stored there, and the transport only reads it.
func (s snapStorage) Snapshot() (*raftpb.Snapshot, error) {
	snap := s.n.snap.Load()
	if snap != nil && !raft.IsEmptySnap(snap) && s.n.confIs(snap.GetMetadata().GetConfState()) {
		return snap, nil
	}
	s.n.wantSnapshot()
	return nil, raft.ErrSnapshotTemporarilyUnavailable
}

// memSnapshot is what MemoryStorage gets of snap: its metadata alone.
// MemoryStorage clones the snapshot it is given and each one it returns,
// state and all; raft reads the state only through snapStorage, which
// serves it from n.snap.
//
// The metadata is a copy: MemoryStorage fills in what is missing of the
// metadata it is given, which must not write to snap once it is shared.
func memSnapshot(snap *raftpb.Snapshot) *raftpb.Snapshot {
	return &raftpb.Snapshot{Metadata: proto.Clone(snap.GetMetadata()).(*raftpb.SnapshotMetadata)}
}

// setWritingSnap marks the time this node writes a snapshot to its disk,
// its own or the leader's (the two may overlap: calls nest): meanwhile
// its disk is busy (diskBusy).
func (n *Node) setWritingSnap(on bool) { n.st.wal.SetBusy(on) }

// A write of the log that takes more than slowSync (a sync takes 0.1-10
// ms on a healthy disk) makes the disk count as busy for slowFor after it
// (diskBusy).
const (
	slowSync = 50 * time.Millisecond
	slowFor  = 2 * time.Second
)

// diskSlow marks the disk busy until t: a write of the log was slow.
func (n *Node) diskSlow(t time.Time) { n.st.wal.SetSlowUntil(t) }

// diskBusy reports whether this node's disk is busy: it is writing a
// snapshot, or a write of the log was slow lately. Meanwhile the log's
// writes are the append thread's (kickAppend), and no sync is held (WAL).
func (n *Node) diskBusy() bool { return n.st.wal.Busy() }

// stashState keeps aside the state of a snapshot m brings from the leader
// and returns m without it, for raft, which copies a snapshot it takes in
// whole, and again when it hands it over to be saved: two copies of tens
// of megabytes, each a memmove no goroutine can be preempted in, on
// raft's goroutine. installSnapshot takes the state back (stashed). A
// state stays only if raft takes its snapshot in: the drain that follows
// the step pins it (pinStash) and drops the rest (dropUnpinned); so it is
// raft that decides what is kept, and what it will ask for is there.
// Under mu, with the step it is for.
func (n *Node) stashState(m *raftpb.Message) *raftpb.Message {
	snap := m.GetSnapshot()
	if m.GetType() != raftpb.MessageType_MsgSnap || len(snap.GetData()) == 0 {
		return m
	}
	n.stashMu.Lock()
	n.stash = append(n.stash, stashEntry{snap: snap})
	n.stashMu.Unlock()
	// m is the transport's, decoded for this call alone: raft gets it
	// with a snapshot of the metadata only (a copy: raft fills in what
	// is missing of a snapshot's metadata).
	m.Snapshot = &raftpb.Snapshot{Metadata: proto.Clone(snap.GetMetadata()).(*raftpb.SnapshotMetadata)}
	return m
}

// stashEntry is a snapshot's state kept aside from raft (stashState).
type stashEntry struct {
	snap   *raftpb.Snapshot
	pinned bool // raft handed its snapshot to the append thread: installSnapshot takes it
}

// pinStash keeps the state of snap, which raft hands to the append thread
// without it, for installSnapshot. Under mu.
func (n *Node) pinStash(snap *raftpb.Snapshot) {
	n.stashMu.Lock()
	defer n.stashMu.Unlock()
	for i := range n.stash {
		e := &n.stash[i]
		if !e.pinned && e.snap.GetMetadata().GetIndex() == snap.GetMetadata().GetIndex() && e.snap.GetMetadata().GetTerm() == snap.GetMetadata().GetTerm() {
			e.pinned = true
			return
		}
	}
}

// dropUnpinned drops the states of snapshots raft did not take in (it will
// never ask for them). Under mu, after a step and its drain.
func (n *Node) dropUnpinned() {
	n.stashMu.Lock()
	defer n.stashMu.Unlock()
	n.stash = slices.DeleteFunc(n.stash, func(e stashEntry) bool { return !e.pinned })
}

// stashed returns snap, from raft, with the state stashState kept for it
// (snap itself when it has its state). A state that is not there is a
// bug: the install fails, and with it the node's appends (appendBatch).
func (n *Node) stashed(snap *raftpb.Snapshot) (*raftpb.Snapshot, error) {
	if len(snap.GetData()) > 0 {
		return snap, nil
	}
	n.stashMu.Lock()
	defer n.stashMu.Unlock()
	for i, e := range n.stash {
		s := e.snap
		if e.pinned && s.GetMetadata().GetIndex() == snap.GetMetadata().GetIndex() && s.GetMetadata().GetTerm() == snap.GetMetadata().GetTerm() {
			n.stash = slices.Delete(n.stash, i, i+1)
			return &raftpb.Snapshot{Data: s.GetData(), Metadata: snap.GetMetadata()}, nil
		}
	}
	return nil, fmt.Errorf("replica: the state of snapshot %d (term %d) is not here", snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm())
}

// keepSnap makes snap the one raft sends unless a newer one is there: a
// snapshot from the leader may be installed while this node's own, older
// one is still being written.
func (n *Node) keepSnap(snap *raftpb.Snapshot) {
	idx := snap.GetMetadata().GetIndex()
	for {
		old := n.snap.Load()
		if old != nil && old.GetMetadata().GetIndex() >= idx {
			return
		}
		if n.snap.CompareAndSwap(old, snap) {
			return
		}
	}
}

// confIs reports whether cs is the configuration the node has applied.
func (n *Node) confIs(cs *raftpb.ConfState) bool {
	n.bookMu.Lock()
	defer n.bookMu.Unlock()
	return n.confState != nil && n.confState.Equivalent(cs) == nil
}

// wantSnapshot makes a snapshot due at once, even in the pause after a
// failed write (raft sends it from memory whether or not it reaches the
// disk), and wakes the apply thread, which takes it.
func (n *Node) wantSnapshot() {
	n.snapWant.Store(true)
	n.applyQ.signal()
}
