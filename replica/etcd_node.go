package replica

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/protobuf/proto"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
)

// Node is one member of a latchd cluster over go.etcd.io/raft/v3 with
// asynchronous storage writes (the default build; -tags hashicorpraft
// builds the hashicorp/raft one instead). Its API is the
// hashicorp-backed Node's.
//
// Goroutines: whoever has input for raft steps the RawNode under mu and
// hands out the Ready (the transport's readers, the append and apply
// threads with their responses, a proposer when raft is free); the raft
// loop ticks, runs closures (do, call) and proposes what waited in the
// queue; the append thread writes entries, hard state and snapshots, one
// fdatasync per batch of MsgStorageAppend, then delivers their responses;
// the apply thread applies committed entries to the FSM, answers
// proposers and takes snapshots; the transport's writers; and run
// (restamp, expiry), as in the hashicorp Node.
type Node struct {
	cfg    Config
	log    *zap.Logger
	fsm    *FSM
	st     Storage
	mem    *raft.MemoryStorage
	tr     *transport
	id     uint64
	origin uint64
	seq    atomic.Uint64
	now    func() int64

	// mu guards rn. Whoever has input for raft (the transport's readers,
	// the append and apply threads with their responses, a proposer, the
	// ticker) steps it and hands out the Ready itself: no hop through a
	// loop goroutine on the commit path.
	mu sync.Mutex
	rn *raft.RawNode

	// Published by the raft loop.
	lead      atomic.Uint64
	role      atomic.Uint32 // raft.StateType
	term      atomic.Uint64
	commit    atomic.Uint64
	leadTerm  atomic.Uint64 // term this node leads in (0 when it does not)
	leaderChg atomic.Uint64

	readyMu sync.Mutex
	ready   chan struct{}
	isReady atomic.Bool

	propQ propQueue
	hold  batchHold // under mu
	// Counted on the leader as it proposes (Status).
	propEntries, propCmds, holds, holdTimeouts atomic.Uint64
	fnc                                        chan func()
	appQ                                       msgQueue // to the append thread
	applyQ                                     msgQueue // to the apply thread

	// Membership, as applied: raft ID -> member.
	bookMu    sync.Mutex
	book      map[uint64]Member
	confState *raftpb.ConfState

	waitMu  sync.Mutex
	waiters map[uint64]*waiter // by the ReqID of the entry's first command
	// waitShut: Shutdown has answered the waiters; a proposal that gets
	// here later is answered ErrClosed at once (under waitMu).
	waitShut bool
	ccWait   map[uint64]chan error

	// appRun is held by whoever writes the log (the append thread, or a
	// follower's transport reader: see kickAppend); it guards lastHS and
	// the order of the append queue's batches.
	appRun    sync.Mutex
	lastHS    raftpb.HardState
	appFailed atomic.Bool // a write failed: nothing more is written or acknowledged

	// applyRun is held by whoever applies (the apply thread, or a
	// goroutine applying inline: see kickApply); it guards answers,
	// snapIndex and the order of the apply queue's batches.
	applyRun  sync.Mutex
	answers   []pendingAnswer                 // applied entries' proposers, answered (or handed to answerRun) before raft hears of the apply (applyBatch)
	answerRun atomic.Pointer[AnswerRunner]    // runs ProposeFunc's answers (SetAnswerRunner); nil: applyRun's holder does
	ownerBuf  []answered                      // their owners, for the batch wait
	applyMu   sync.Mutex                      // an entry's application, against a snapshot taken meanwhile
	snapIndex uint64                          // apply thread
	snapBytes atomic.Uint64                   // the size of the last snapshot's state (written by writeSnapshot)
	stashMu   sync.Mutex                      // guards stash
	stash     []stashEntry                    // states of snapshots from the leader, for installSnapshot (stashState)
	snap      atomic.Pointer[raftpb.Snapshot] // the newest snapshot taken or installed, state and all: what raft sends (snapStorage); never changed once stored
	logBytes  uint64                          // apply thread: bytes of entries applied since it
	snapMu    sync.Mutex                      // held from a snapshot's copy to the end of its write (maybeSnapshot, writeSnapshot)
	encoding  atomic.Bool                     // a snapshot's state is being encoded (captureSnapshot to writeSnapshot's Finish)
	snapRetry atomic.Int64                    // after a failed write, a snapshot is due at this time (monoNow) and not before; 0 after a good one
	snapPause time.Duration                   // the wait before the next retry (writeSnapshot, under snapMu)
	snapFails atomic.Uint64                   // snapshot writes that failed (Status)
	snapWant  atomic.Bool                     // raft needs a snapshot to send (snapStorage): due at once, pause or not
	restored  chan error                      // the apply thread's answer to a snapshot to restore
	forceSnap atomic.Pointer[chan struct{}]

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type waiter struct {
	batch  []*proposal // nil for a single command proposed by apply
	single chan proposalResult
}

// proposal is one command waiting to be proposed.
type proposal struct {
	c     Command
	parks bool
	done  chan proposalResult
	cb    func(Reply, error) // instead of done: ProposeFunc's
	raw   bool               // a single-command entry (Restamp, Expire), not a batch
}

// answer hands p its result: to its callback, or to Propose waiting on done.
func (p *proposal) answer(r Reply, err error) {
	if p.cb == nil {
		p.done <- proposalResult{r: r, err: err}
		return
	}
	if err == nil {
		err = r.Err
	}
	p.cb(r, err)
}

type pendingAnswer struct {
	w   *waiter
	res any
}

type proposalResult struct {
	r   Reply
	err error
}

// msgQueue is an unbounded FIFO of messages with a wake-up channel.
type msgQueue struct {
	mu   sync.Mutex
	q    []*raftpb.Message
	wake chan struct{}
}

func (q *msgQueue) init() { q.wake = make(chan struct{}, 1) }

func (q *msgQueue) push(ms ...*raftpb.Message) {
	q.mu.Lock()
	q.q = append(q.q, ms...)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// add queues ms without waking the consumer (see kickApply).
func (q *msgQueue) add(ms ...*raftpb.Message) {
	q.mu.Lock()
	q.q = append(q.q, ms...)
	q.mu.Unlock()
}

func (q *msgQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *msgQueue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q) > 0
}

func (q *msgQueue) take() []*raftpb.Message {
	q.mu.Lock()
	ms := q.q
	q.q = nil
	q.mu.Unlock()
	return ms
}

type propQueue struct {
	mu   sync.Mutex
	q    []*proposal
	wake chan struct{}
}

func (q *propQueue) push(p *proposal) {
	q.mu.Lock()
	q.q = append(q.q, p)
	q.mu.Unlock()
}

// putBack returns ps, taken and not proposed, to the front of the queue.
func (q *propQueue) putBack(ps []*proposal) {
	q.mu.Lock()
	q.q = append(ps, q.q...)
	q.mu.Unlock()
}

func (q *propQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q)
}

// scan calls f on the queued proposals from index from on and returns
// the queue's length.
func (q *propQueue) scan(from int, f func(*proposal)) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range q.q[min(from, len(q.q)):] {
		f(p)
	}
	return len(q.q)
}

func (q *propQueue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q) > 0
}

func (q *propQueue) take() []*proposal {
	q.mu.Lock()
	ps := q.q
	q.q = nil
	q.mu.Unlock()
	return ps
}

// maxInflightEntries bounds the entries this leader has proposed and not
// yet applied; proposals that arrive meanwhile wait and leave together in
// the next entry. The leader's own write still runs beside its followers'
// (that is what AsyncStorageWrites buys); more entries in flight only
// made each one carry fewer commands. bench/cluster.sh on the 2-core VM,
// 1 / 10 / 100 workers, acquire+release/s: 1 in flight 715-738 / 3,414-3,803
// / 16,465-18,132; 2 in flight 597-768 / 2,237-3,187 / 10,682-13,353;
// 4 and 16 lower still at 10 and 100 workers. Measured again after the
// commit path lost its hand-offs (docs/cluster.md, "How a commit
// flows"), alternating, at 10 / 100 workers: 1 in flight 4,314-4,374 /
// 22,218-23,586; 2 in flight 3,815-3,998 / 20,828-22,044; 3 in flight
// 3,852-3,906 / 19,639-19,867. With the batch wait (etcd_hold.go), 2 in
// flight at 10 / 100 workers: 8,369 / 34,037 against 8,533 / 36,302.
const maxInflightEntries = 1

// raftID maps a node ID to etcd raft's numeric ID.
func raftID(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	if v := h.Sum64(); v != 0 && v != raft.LocalAppendThread && v != raft.LocalApplyThread {
		return v
	}
	return 1
}

// New starts a node on st (see DiskStorage). With cfg.Bootstrap, an empty
// directory gets cfg.Peers as its first configuration, as a snapshot at
// index 1 that every bootstrapping peer writes alike.
func New(cfg Config, log *zap.Logger, st Storage) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	origin := clock.Salt() | 1
	fsm, err := NewFSM(cfg.Engine, origin)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: log, fsm: fsm, st: st, mem: raft.NewMemoryStorage(), id: raftID(cfg.NodeID),
		origin: origin, now: clock.Now, ready: make(chan struct{}), fnc: make(chan func(), 16),
		book: make(map[uint64]Member), waiters: make(map[uint64]*waiter), ccWait: make(map[uint64]chan error),
		stop: make(chan struct{}), restored: make(chan error, 1), confState: &raftpb.ConfState{}}
	n.appQ.init()
	n.applyQ.init()
	n.propQ.wake = make(chan struct{}, 1)

	snap, err := st.loadSnapshot()
	if err != nil {
		return nil, err
	}
	hs, err := st.readHardState()
	if err != nil {
		return nil, err
	}
	last := st.wal.LastIndex()
	if snap == nil && last == 0 && cfg.Bootstrap {
		if snap, err = n.bootstrapSnapshot(); err != nil {
			return nil, err
		}
		if err := st.saveSnapshot(snap, cfg.SnapshotRetain); err != nil {
			return nil, fmt.Errorf("replica: bootstrap: %w", err)
		}
	}
	if snap != nil {
		if err := n.restoreSnapshot(snap); err != nil {
			return nil, err
		}
		if err := n.mem.ApplySnapshot(memSnapshot(snap)); err != nil {
			return nil, fmt.Errorf("replica: %w", err)
		}
		n.keepSnap(snap)
		n.snapIndex = snap.GetMetadata().GetIndex()
		n.snapBytes.Store(uint64(len(snap.GetData())))
	}
	ents, err := st.readEntries(n.snapIndex)
	if err != nil {
		return nil, err
	}
	if len(ents) > 0 && ents[0].GetIndex() != n.snapIndex+1 {
		// Entries that do not follow the snapshot (a crash between a
		// snapshot install and the log's reset left older ones): the
		// leader sends what follows.
		ents = nil
	}
	if err := n.mem.Append(ents); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	li, _ := n.mem.LastIndex()
	hs.Commit = new(min(max(hs.GetCommit(), n.snapIndex), li))
	if err := n.mem.SetHardState(hs); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	rc := &raft.Config{
		ID:                        n.id,
		ElectionTick:              10,
		HeartbeatTick:             2,
		Storage:                   snapStorage{MemoryStorage: n.mem, n: n},
		Applied:                   n.snapIndex,
		AsyncStorageWrites:        true,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxCommittedSizePerReady:  16 << 20,
		MaxUncommittedEntriesSize: 256 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    raftLog(cfg, log),
	}
	if n.rn, err = raft.NewRawNode(rc); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	n.tr = newTransport2(&n.st, log)
	n.tr.self = n.id
	n.tr.selfAddr = cfg.AdvertiseAddr
	if n.tr.selfAddr == "" {
		n.tr.selfAddr = st.ln.Addr().String()
	}
	n.tr.recv = func(m *raftpb.Message) { n.stepKick(true, m) }
	n.tr.report = func(id uint64, _ bool) {
		n.do(func() { n.rn.ReportUnreachable(id) })
	}
	n.tr.snapDone = func(id uint64, ok bool) {
		s := raft.SnapshotFinish
		if !ok {
			s = raft.SnapshotFailure
		}
		n.do(func() { n.rn.ReportSnapshot(id, s) })
	}
	n.bookMu.Lock()
	for id, m := range n.book {
		if id != n.id {
			n.tr.setPeer(id, m.RaftAddr)
		}
	}
	n.bookMu.Unlock()
	n.tr.start()
	n.wg.Add(4)
	go n.raftLoop()
	go n.appendLoop()
	go n.applyLoop()
	go n.run()
	return n, nil
}

// do runs f on the raft loop without waiting (dropped once stopping).
func (n *Node) do(f func()) {
	select {
	case n.fnc <- f:
	case <-n.stop:
	default:
		go func() {
			select {
			case n.fnc <- f:
			case <-n.stop:
			}
		}()
	}
}

// call runs f on the raft loop and waits for it.
func (n *Node) call(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case n.fnc <- func() { f(); close(done) }:
	case <-n.stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-n.stop:
		return ErrClosed
	}
}

// raftLog is etcd raft's logger: zap at raft's own levels, filtered by
// cfg.RaftLogLevel ("off" drops everything).
func raftLog(cfg Config, log *zap.Logger) raft.Logger {
	lvl := zapcore.InvalidLevel // off
	switch cfg.RaftLogLevel {
	case "trace", "debug":
		lvl = zapcore.DebugLevel
	case "info":
		lvl = zapcore.InfoLevel
	case "warn":
		lvl = zapcore.WarnLevel
	case "error":
		lvl = zapcore.ErrorLevel
	}
	return &zapRaftLogger{l: log.Named("etcdraft").With(zap.String("node_id", cfg.NodeID)).Sugar(), min: lvl}
}

type zapRaftLogger struct {
	l   *zap.SugaredLogger
	min zapcore.Level
}

func (z *zapRaftLogger) on(l zapcore.Level) bool { return z.min != zapcore.InvalidLevel && l >= z.min }

func (z *zapRaftLogger) Debug(v ...any) {
	if z.on(zapcore.DebugLevel) {
		z.l.Debug(v...)
	}
}

func (z *zapRaftLogger) Debugf(f string, v ...any) {
	if z.on(zapcore.DebugLevel) {
		z.l.Debugf(f, v...)
	}
}

func (z *zapRaftLogger) Info(v ...any) {
	if z.on(zapcore.InfoLevel) {
		z.l.Info(v...)
	}
}

func (z *zapRaftLogger) Infof(f string, v ...any) {
	if z.on(zapcore.InfoLevel) {
		z.l.Infof(f, v...)
	}
}

func (z *zapRaftLogger) Warning(v ...any) {
	if z.on(zapcore.WarnLevel) {
		z.l.Warn(v...)
	}
}

func (z *zapRaftLogger) Warningf(f string, v ...any) {
	if z.on(zapcore.WarnLevel) {
		z.l.Warnf(f, v...)
	}
}

func (z *zapRaftLogger) Error(v ...any) {
	if z.on(zapcore.ErrorLevel) {
		z.l.Error(v...)
	}
}

func (z *zapRaftLogger) Errorf(f string, v ...any) {
	if z.on(zapcore.ErrorLevel) {
		z.l.Errorf(f, v...)
	}
}

// Fatal and Panic are raft's invariant failures: never filtered, and
// they panic rather than exit, so deferred cleanup still runs.
func (z *zapRaftLogger) Fatal(v ...any)            { z.l.Panic(v...) }
func (z *zapRaftLogger) Fatalf(f string, v ...any) { z.l.Panicf(f, v...) }
func (z *zapRaftLogger) Panic(v ...any)            { z.l.Panic(v...) }
func (z *zapRaftLogger) Panicf(f string, v ...any) { z.l.Panicf(f, v...) }

// Snapshot data: "LTCHETCD" 1, the members (uvarint count; raft ID as
// uvarint, node ID, raft address, suffrage), then the FSM's state.
const etcdSnapMagic = "LTCHETCD\x01"

func (n *Node) bootstrapSnapshot() (*raftpb.Snapshot, error) {
	cs := &raftpb.ConfState{}
	peers := slices.Clone(n.cfg.Peers)
	slices.SortFunc(peers, func(a, b Peer) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	book := make(map[uint64]Member)
	for _, p := range peers {
		id := raftID(p.ID)
		cs.Voters = append(cs.Voters, id)
		book[id] = Member{ID: p.ID, RaftAddr: p.RaftAddr, Suffrage: "voter"}
	}
	data := n.fsm.appendState(appendSnapHeader(nil, book))
	return &raftpb.Snapshot{Data: data,
		Metadata: &raftpb.SnapshotMetadata{ConfState: cs, Index: new(uint64(1)), Term: new(uint64(1))}}, nil
}

// appendSnapHeader appends a snapshot's magic and members to b; the FSM's
// state follows them.
func appendSnapHeader(b []byte, book map[uint64]Member) []byte {
	ids := make([]uint64, 0, len(book))
	for id := range book {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b = append(b, etcdSnapMagic...)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		m := book[id]
		b = binary.AppendUvarint(b, id)
		b = appendString(b, m.ID)
		b = appendString(b, m.RaftAddr)
		b = appendString(b, m.Suffrage)
	}
	return b
}

// restoreSnapshot loads snap's members and FSM state.
func (n *Node) restoreSnapshot(snap *raftpb.Snapshot) error {
	data := snap.GetData()
	if len(data) < len(etcdSnapMagic) || string(data[:len(etcdSnapMagic)]) != etcdSnapMagic {
		return ErrBadSnapshot
	}
	d := decoder{b: data[len(etcdSnapMagic):]}
	cnt := d.uvarint()
	if cnt > uint64(len(d.b)) {
		return ErrBadSnapshot
	}
	book := make(map[uint64]Member, cnt)
	for range cnt {
		id := d.uvarint()
		book[id] = Member{ID: string(d.bytes()), RaftAddr: string(d.bytes()), Suffrage: string(d.bytes())}
	}
	if d.bad {
		return ErrBadSnapshot
	}
	if err := n.fsm.Restore(d.b); err != nil {
		return err
	}
	if n.fsm.AppliedIndex() < snap.GetMetadata().GetIndex() {
		n.fsm.skipEntry(snap.GetMetadata().GetIndex())
	}
	n.bookMu.Lock()
	old := n.book
	n.book = book
	n.confState = proto.Clone(snap.GetMetadata().GetConfState()).(*raftpb.ConfState)
	n.bookMu.Unlock()
	if n.tr != nil {
		for id := range old {
			if _, ok := book[id]; !ok {
				n.tr.removePeer(id)
			}
		}
		for id, m := range book {
			if id != n.id {
				n.tr.setPeer(id, m.RaftAddr)
			}
		}
	}
	return nil
}

// raftLoop ticks raft, runs the closures of do and call, and proposes
// what a proposer queued while another goroutine held mu.
func (n *Node) raftLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(max(n.cfg.ElectionTimeout/10, time.Millisecond))
	defer tick.Stop()
	for {
		ticked := false
		var f func()
		select {
		case <-n.stop:
			return
		case <-tick.C:
			ticked = true
		case <-n.propQ.wake:
		case f = <-n.fnc:
		}
		n.mu.Lock()
		if ticked {
			n.rn.Tick()
		}
		if f != nil {
			f()
		}
		n.proposeQueued()
		later := n.drainReady()
		n.mu.Unlock()
		n.kickAppend(false)
		n.kickApply(false)
		n.sendAll(later)
	}
}

// step hands messages to raft and hands out what they make ready (the
// append and apply threads' responses).
func (n *Node) step(ms ...*raftpb.Message) { n.stepKick(false, ms...) }

// stepKick is step; inline: see kickApply (a transport reader).
func (n *Node) stepKick(inline bool, ms ...*raftpb.Message) {
	if len(ms) == 0 {
		return
	}
	snapIn := carriesSnap(ms)
	n.mu.Lock()
	for _, m := range ms {
		// A snapshot's state goes aside, and comes back only if raft
		// takes the snapshot in (stashState): both under mu, so that
		// another reader's step cannot drop it in between.
		_ = n.rn.Step(n.stashState(m))
	}
	n.proposeQueued()
	later := n.drainReady()
	if snapIn {
		n.dropUnpinned()
	}
	n.mu.Unlock()
	// A follower's reader writes what the leader sent itself (its next
	// messages wait in the socket and join the next write); the leader's
	// own writes stay on the append thread, beside its readers' acks.
	n.kickAppend(inline && !n.isLeaderState() && !snapIn)
	n.kickApply(inline)
	n.sendAll(later)
}

// submit queues a proposal and proposes at once if raft is free; else the
// goroutine holding it, or the raft loop, takes it with the others queued
// meanwhile (one entry for all of them: group commit).
func (n *Node) submit(p *proposal) {
	n.propQ.push(p)
	if n.mu.TryLock() {
		n.proposeQueued()
		later := n.drainReady()
		n.mu.Unlock()
		n.kickAppend(false)
		n.kickApply(true)
		n.sendAll(later)
		n.failQueuedIfStopping()
		return
	}
	select {
	case n.propQ.wake <- struct{}{}:
	default:
	}
	n.failQueuedIfStopping()
}

// failQueuedIfStopping answers ErrClosed to every proposal still queued
// once Shutdown has begun: the raft loop that would take them is gone or
// going. A proposal whose submit overlaps Shutdown's is answered by
// whichever of the two takes it from the queue.
func (n *Node) failQueuedIfStopping() {
	if !n.stopping() {
		return
	}
	for _, p := range n.propQ.take() {
		n.finish(&waiter{batch: []*proposal{p}}, nil, ErrClosed)
	}
}

// proposeQueued puts the queued proposals into the log: the commands that
// wait together share one entry (group commit), up to maxBatch each.
func (n *Node) proposeQueued() {
	if n.hold.on {
		// Counted in place: a wait sees every arrival, and taking
		// and putting back the queue each time copies it. An empty
		// queue is judged too: a wait past its deadline ends there
		// (the timer's wake), not when the next command arrives.
		if !n.holdOver() {
			return
		}
	}
	ps := n.propQ.take()
	for len(ps) > 0 {
		if n.inflightBusy() {
			// Wait for an entry to apply (whoever applies it then steps
			// raft, which comes back here): fewer, fuller entries.
			n.propQ.putBack(ps)
			return
		}
		if ps[0].raw {
			n.propose([]*proposal{ps[0]})
			ps = ps[1:]
			continue
		}
		k := 0
		for k < len(ps) && k < maxBatch && !ps[k].raw {
			k++
		}
		n.propose(ps[:k])
		ps = ps[k:]
	}
}

// inflightBusy reports whether maxInflightEntries entries proposed here
// are not applied yet. Under mu.
func (n *Node) inflightBusy() bool {
	n.waitMu.Lock()
	defer n.waitMu.Unlock()
	return len(n.waiters) >= maxInflightEntries
}

func (n *Node) propose(batch []*proposal) {
	var data []byte
	if batch[0].raw {
		data = AppendCommand(nil, &batch[0].c)
	} else {
		data = make([]byte, 0, 1+binary.MaxVarintLen64+64*len(batch))
		data = append(data, batchVersion)
		data = binary.AppendUvarint(data, uint64(len(batch)))
		var one []byte
		for _, p := range batch {
			one = AppendCommand(one[:0], &p.c)
			data = binary.AppendUvarint(data, uint64(len(one)))
			data = append(data, one...)
		}
	}
	key := batch[0].c.ReqID
	n.waitMu.Lock()
	if n.waitShut {
		// Shutdown has answered the waiters already: no one would
		// answer this one.
		n.waitMu.Unlock()
		n.finish(&waiter{batch: batch}, nil, ErrClosed)
		return
	}
	n.waiters[key] = &waiter{batch: batch}
	n.waitMu.Unlock()
	if n.rn.BasicStatus().RaftState != raft.StateLeader {
		n.failWaiter(key, n.notLeader())
		return
	}
	if err := n.rn.Propose(data); err != nil {
		n.failWaiter(key, n.notLeader())
		return
	}
	if !batch[0].raw { // the node's own Restamp and Expire are not counted
		n.propEntries.Add(1)
		n.propCmds.Add(uint64(len(batch)))
	}
}

func (n *Node) failWaiter(key uint64, err error) {
	n.waitMu.Lock()
	w := n.waiters[key]
	delete(n.waiters, key)
	n.waitMu.Unlock()
	if w != nil {
		n.finish(w, nil, err)
	}
}

// finish answers a batch's proposers with replies (one per command) or err.
func (n *Node) finish(w *waiter, res any, err error) { n.finishTo(w, res, err, nil) }

// laterAnswer is a ProposeFunc proposal's answer left to the AnswerRunner.
type laterAnswer struct {
	p *proposal
	r Reply
}

// finishTo is finish, with the callbacks' answers (ProposeFunc's) appended
// to *later instead of run when later is not nil.
func (n *Node) finishTo(w *waiter, res any, err error, later *[]laterAnswer) {
	var replies batchReply
	switch r := res.(type) {
	case batchReply:
		replies = r
	case Reply:
		replies = batchReply{r}
	}
	for i, p := range w.batch {
		var r Reply
		if err == nil {
			if i < len(replies) {
				r = replies[i]
			} else {
				r.Err = ErrBadCommand
			}
		}
		if p.parks && (err != nil || r.Err != nil || r.Outcome.Result != engine.Queued) {
			n.fsm.unregister(p.c.ReqID)
		}
		if later != nil && p.cb != nil {
			*later = append(*later, laterAnswer{p: p, r: r})
			continue
		}
		p.answer(r, err)
	}
}

// drainReady hands out every Ready: messages to peers go out at once (the
// leader's own append runs beside them), local messages to the append and
// apply threads. It returns the messages that can wait until the caller
// has released mu and applied what committed (see urgent).
func (n *Node) drainReady() (later []*raftpb.Message) {
	for n.rn.HasReady() {
		rd := n.rn.Ready()
		if rd.SoftState != nil {
			n.softState(rd.SoftState)
		}
		if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
			if old := n.term.Swap(rd.GetTerm()); old != rd.GetTerm() && rd.SoftState == nil && n.isLeaderState() {
				// Lost and won again between two Readys: a new
				// leadership, which needs its own Restamp.
				n.leadershipLost()
				n.leadTerm.Store(rd.GetTerm())
			}
			n.commit.Store(rd.GetCommit())
		}
		// Peers first: a follower's write is on the commit path more
		// often than the leader's own (which starts a few microseconds
		// later, beside theirs), and a goroutine woken here waits for
		// this one to park unless the other processor takes it.
		for _, m := range rd.Messages {
			if to := m.GetTo(); to != raft.LocalAppendThread && to != raft.LocalApplyThread {
				if urgent(m) {
					n.tr.send(m)
				} else {
					later = append(later, m)
				}
			}
		}
		for _, m := range rd.Messages {
			switch m.GetTo() {
			case raft.LocalAppendThread:
				if sn := m.GetSnapshot(); sn != nil && !raft.IsEmptySnap(sn) && len(sn.GetData()) == 0 {
					n.pinStash(sn)
				}
				n.appQ.add(m) // kickAppend hands it out once mu is released
			case raft.LocalApplyThread:
				n.applyQ.add(m) // kickApply hands it out once mu is released
			}
		}
	}
	return later
}

// urgent reports whether m goes out before the Ready's committed entries
// are applied: everything but heartbeats and MsgApps without entries (on
// a leader, mostly the new commit index after a quorum answered: two
// loopback writes of about 30 µs each that would otherwise sit between
// the quorum's ack and the answer to the proposer). Raft tolerates their
// reordering with later messages.
func urgent(m *raftpb.Message) bool {
	switch m.GetType() {
	case raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgHeartbeatResp:
		return false
	case raftpb.MessageType_MsgApp:
		return len(m.GetEntries()) > 0
	}
	return true
}

// carriesSnap reports whether ms holds a snapshot from the leader: its
// install writes and syncs the whole of it, which a transport reader must
// not wait for (kickAppend).
func carriesSnap(ms []*raftpb.Message) bool {
	for _, m := range ms {
		if m.GetType() == raftpb.MessageType_MsgSnap {
			return true
		}
	}
	return false
}

func (n *Node) sendAll(ms []*raftpb.Message) {
	for _, m := range ms {
		n.tr.send(m)
	}
}

// kickAppend runs after mu is released by whoever drained a Ready: the
// writes it queued are done by the caller itself when inline is true and
// the append thread is idle (no wake-up on the follower's commit path),
// else by the append thread. Not inline while the disk is busy (diskBusy):
// a sync may then take long, and a transport reader stuck in one reads
// nothing meanwhile, the leader's heartbeats included. With both
// followers so deaf the lead moves though the leader is there all along
// (seen at a million held locks, the nodes writing their snapshots;
// TestFollowersWritingSnapshotsKeepHearingTheLeader).
func (n *Node) kickAppend(inline bool) {
	if !n.appQ.pending() {
		return
	}
	if inline && !n.stopping() && !n.diskBusy() && n.appRun.TryLock() {
		n.appendBatch(n.appQ.take())
		n.appRun.Unlock()
		if !n.appQ.pending() {
			return
		}
	}
	n.appQ.signal()
}

// kickApply runs after mu is released by whoever drained a Ready: the
// committed entries it queued are applied by the caller itself when
// inline is true and no one else is applying (no hop to the apply thread:
// a transport reader that just received the quorum's ack, or a proposer,
// applies and answers at once); else the apply thread is woken. The raft
// loop never applies inline (a configuration change's apply calls into
// it), nor does the append thread (its next write would wait).
func (n *Node) kickApply(inline bool) {
	if !n.applyQ.pending() {
		return
	}
	// Not while a snapshot's encoding is under way: an apply may then
	// encode the shards it changes first (engine.StateCapture), and the
	// goroutines that apply inline (a transport reader, a proposer such
	// as an event loop) must not stall for it.
	if inline && !n.stopping() && !n.encoding.Load() && n.applyRun.TryLock() {
		n.applyBatch(n.applyQ.take())
		due := n.snapshotDue()
		n.applyRun.Unlock()
		if !due && !n.applyQ.pending() {
			return
		}
	}
	n.applyQ.signal() // snapshots are the apply thread's: they write files
}

// stopping reports whether Shutdown has begun: the threads that write and
// apply are gone or going, and nothing is done inline any more.
func (n *Node) stopping() bool {
	select {
	case <-n.stop:
		return true
	default:
		return false
	}
}

func (n *Node) softState(ss *raft.SoftState) {
	old := n.lead.Swap(ss.Lead)
	was := raft.StateType(n.role.Swap(uint32(ss.RaftState)))
	wasLeader := was == raft.StateLeader
	if was != ss.RaftState {
		n.log.Info("raft role", zap.String("node_id", n.cfg.NodeID), zap.String("role", roleOf(ss.RaftState)),
			zap.Uint64("term", n.rn.BasicStatus().GetTerm()))
	}
	isLeader := ss.RaftState == raft.StateLeader
	if ss.Lead != old && ss.Lead != raft.None {
		n.leaderChg.Add(1)
		n.log.Info("raft leader", zap.String("node_id", n.cfg.NodeID), zap.String("leader_id", n.memberName(ss.Lead)),
			zap.Uint64("term", n.rn.BasicStatus().GetTerm()), zap.Bool("this_node", ss.Lead == n.id))
	}
	if isLeader {
		n.leadTerm.Store(n.rn.BasicStatus().GetTerm())
	} else {
		n.leadTerm.Store(0)
	}
	if wasLeader && !isLeader {
		n.leadershipLost()
	}
}

// leadershipLost withdraws readiness and answers every proposal in flight:
// entries proposed here may still commit under the next leader, so their
// outcome is unknown.
func (n *Node) leadershipLost() {
	n.setReady(false)
	n.hold.on = false
	n.waitMu.Lock()
	ws := n.waiters
	n.waiters = make(map[uint64]*waiter)
	n.waitMu.Unlock()
	for _, w := range ws {
		n.finish(w, nil, ErrUnknownOutcome)
	}
}

// appendLoop writes what kickAppend left to it: all the MsgStorageAppends
// queued at once, with one fdatasync (appendBatch).
func (n *Node) appendLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.appQ.wake:
		}
		n.appRun.Lock()
		n.appendBatch(n.appQ.take())
		n.appRun.Unlock()
	}
}

// appendBatch persists what the MsgStorageAppends ms carry, with one
// fdatasync, then delivers their responses: acks to the leader first,
// then this node's own. Under appRun.
func (n *Node) appendBatch(ms []*raftpb.Message) {
	if n.appFailed.Load() || len(ms) == 0 {
		return
	}
	var ents []*raftpb.Entry
	var hs *raftpb.HardState
	syncHS := false
	flush := func() error {
		if len(ents) == 0 {
			return nil
		}
		start := time.Now()
		err := n.st.appendEntries(ents)
		if took := time.Since(start); took > slowSync {
			n.diskSlow(start.Add(took + slowFor))
		}
		if err == nil {
			err = n.mem.Append(ents)
		}
		ents = nil
		return err
	}
	var err error
	for _, m := range ms {
		if snap := m.GetSnapshot(); snap != nil && !raft.IsEmptySnap(snap) {
			if err = flush(); err != nil {
				break
			}
			if err = n.installSnapshot(snap); err != nil {
				break
			}
		}
		if es := m.GetEntries(); len(es) > 0 {
			if len(ents) > 0 && es[0].GetIndex() != ents[len(ents)-1].GetIndex()+1 {
				if err = flush(); err != nil {
					break
				}
			}
			ents = append(ents, es...)
		}
		if m.Term != nil {
			hs = &raftpb.HardState{Term: new(m.GetTerm()), Vote: new(m.GetVote()), Commit: new(m.GetCommit())}
			if hs.GetTerm() != n.lastHS.GetTerm() || hs.GetVote() != n.lastHS.GetVote() {
				syncHS = true
			}
		}
	}
	if err == nil {
		err = flush()
	}
	writeHS := func() error {
		if err := n.st.writeHardState(hs, syncHS); err != nil {
			return err
		}
		n.lastHS = raftpb.HardState{Term: new(hs.GetTerm()), Vote: new(hs.GetVote()), Commit: new(hs.GetCommit())}
		return n.mem.SetHardState(hs)
	}
	if err == nil && hs != nil && syncHS {
		err = writeHS() // a term or vote: on disk before anything acts on it
	}
	if err != nil {
		n.appendFailed(err)
		return
	}
	// Acks to the leader first (a follower's MsgAppResp is on the
	// commit path), then this node's own responses in one step.
	var local []*raftpb.Message
	for _, m := range ms {
		for _, r := range m.GetResponses() {
			if r.GetTo() == n.id {
				local = append(local, r)
			} else {
				n.tr.send(r)
			}
		}
	}
	if hs != nil && !syncHS {
		// A commit index alone is not synced (see etcd_store.go), so
		// its write need not delay the acks.
		if err := writeHS(); err != nil {
			n.appendFailed(err)
			return
		}
	}
	n.step(local...)
}

// appendFailed stops the append thread after a failed write: the log's
// tail is unknown, so this node stops taking part rather than acknowledge
// what may not be on disk.
func (n *Node) appendFailed(err error) {
	n.log.Error("raft log write failed; this node stops acknowledging", zap.Error(err))
	n.appFailed.Store(true)
}

// installSnapshot persists a snapshot received from the leader, has the
// apply thread restore it (after what it is applying), and replaces the
// in-memory log.
func (n *Node) installSnapshot(snap *raftpb.Snapshot) error {
	snap, serr := n.stashed(snap)
	if serr != nil {
		return serr
	}
	// This node's own snapshot may still be being written
	// (writeSnapshot), and the apply thread may start another before it
	// restores this one: harmless, so this thread does not wait for
	// it. That snapshot is older than this one (the leader sends one
	// past what this node has), so the newest file, which a restart
	// loads, is this one; the log behind it is cleared below, and the
	// writer's compaction is then below the log's first entry (nothing to
	// delete) and raft's (ErrCompacted).
	n.setWritingSnap(true)
	err := n.st.saveSnapshot(snap, n.cfg.SnapshotRetain)
	n.setWritingSnap(false)
	if err != nil {
		return err
	}
	if err := n.st.wal.DeleteRange(0, ^uint64(0)); err != nil {
		return err
	}
	n.applyQ.push(&raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), Snapshot: snap})
	select {
	case err := <-n.restored:
		if err != nil {
			return err
		}
	case <-n.stop:
		return ErrClosed
	}
	if err := n.mem.ApplySnapshot(memSnapshot(snap)); err != nil {
		return err
	}
	n.keepSnap(snap)
	return nil
}
