package replica

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/latchd/latchd/internal/clock"
)

// Node is one member of a latchd cluster over go.etcd.io/raft/v3 with
// asynchronous storage writes.
//
// Goroutines: whoever has input for raft steps the RawNode under mu and
// hands out the Ready (the transport's readers, the append and apply
// threads with their responses, a proposer when raft is free); the raft
// loop ticks, runs closures (do, call) and proposes what waited in the
// queue; the append thread writes entries, hard state and snapshots, one
// fdatasync per batch of MsgStorageAppend, then delivers their responses;
// the apply thread applies committed entries to the FSM, answers
// proposers and takes snapshots; the transport's writers; and run
// (restamp, expiry: leader.go).
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

	// mu guards rn: whoever has input for raft steps it and hands out
	// the Ready itself, with no hop to a loop goroutine (see Node).
	mu sync.Mutex
	rn *raft.RawNode

	// Published by the raft loop.
	lead      atomic.Uint64
	role      atomic.Uint32 // raft.StateType
	term      atomic.Uint64
	commit    atomic.Uint64
	leadTerm  atomic.Uint64 // term this node leads in (0 when it does not)
	leaderChg atomic.Uint64

	reads readIndexes // ReadBarrier's rounds (readindex.go)

	readyMu sync.Mutex
	ready   chan struct{}
	isReady atomic.Bool

	propQ   queue[*proposal]
	hold    batchHold // under mu
	notices notices   // commit notices waiting for the next append (notice.go)
	// Counted on the leader as it proposes (Status).
	propEntries, propCmds, holds, holdTimeouts atomic.Uint64
	fnc                                        chan func()
	appQ                                       queue[*raftpb.Message] // to the append thread
	applyQ                                     queue[*raftpb.Message] // to the apply thread

	// Membership, as applied: raft ID -> member.
	bookMu    sync.Mutex
	book      map[uint64]Member
	confState *raftpb.ConfState

	waitMu  sync.Mutex
	waiters map[uint64]*waiter // by the ReqID of the entry's first command
	// waitShut: Shutdown has answered the waiters; later ones get
	// ErrClosed at once (under waitMu).
	waitShut bool
	ccWait   map[uint64]chan error

	// appRun is held by whoever writes the log (the append thread, or a
	// follower's transport reader: see kickAppend); it guards lastHS and
	// the order of the append queue's batches.
	appRun    sync.Mutex
	lastHS    raftpb.HardState
	appFailed atomic.Bool // a write failed: nothing more is written or acknowledged

	snapWrites atomic.Int32 // snapshots being written to disk (diskBusy)
	slowUntil  atomic.Int64 // a write of the log was slow: the disk counts busy until then (monoNow)

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

// waiter is an entry's proposers, waiting for the entry to apply.
type waiter struct {
	batch []*proposal
}

type pendingAnswer struct {
	w   *waiter
	res any
}

// maxInflightEntries bounds the entries this leader has proposed and not
// yet applied; proposals that arrive meanwhile leave together in the next
// one. More in flight only makes each carry fewer commands, at lower
// throughput (docs/design/replication.md, "From a request to a log entry").
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
	log = cmp.Or(log, zap.NewNop())
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
	n.propQ.init()
	if err := n.loadState(); err != nil {
		return nil, err
	}
	if n.rn, err = raft.NewRawNode(n.raftConfig()); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	n.startTransport()
	n.wg.Go(n.raftLoop)
	n.wg.Go(func() { n.thread(&n.appQ, &n.appRun, n.appendBatch) }) // all the appends queued, one fdatasync
	n.wg.Go(func() {
		n.thread(&n.applyQ, &n.applyRun, func(ms []*raftpb.Message) {
			n.applyBatch(ms)
			n.maybeSnapshot(false)
		})
	})
	n.wg.Go(n.run)
	n.wg.Go(n.promoteLoop)
	return n, nil
}

// loadState reads the raft directory back: the newest snapshot (or, for a
// new bootstrapping node, the first one) restored into the FSM, the log
// entries that follow it and the hard state, into MemoryStorage.
func (n *Node) loadState() error {
	st := &n.st
	snap, err := st.loadSnapshot()
	if err != nil {
		return err
	}
	if len(st.passedOver) > 0 {
		n.log.Warn("damaged snapshots passed over", zap.Strings("files", st.passedOver))
	}
	hs, err := st.readHardState()
	if err != nil {
		return err
	}
	if snap == nil && st.wal.LastIndex() == 0 && n.cfg.Bootstrap {
		snap = n.bootstrapSnapshot()
		if err := st.saveSnapshot(snap, n.cfg.SnapshotRetain); err != nil {
			return fmt.Errorf("replica: bootstrap: %w", err)
		}
	}
	if snap != nil {
		if err := n.restoreSnapshot(snap); err != nil {
			return err
		}
		if err := n.mem.ApplySnapshot(memSnapshot(snap)); err != nil {
			return fmt.Errorf("replica: %w", err)
		}
		n.keepSnap(snap)
		n.snapIndex = snap.GetMetadata().GetIndex()
		n.snapBytes.Store(uint64(len(snap.GetData())))
	}
	ents, err := st.readEntries(n.snapIndex)
	if err != nil {
		return err
	}
	if len(ents) > 0 && ents[0].GetIndex() != n.snapIndex+1 {
		// Entries that do not follow the snapshot (a crash between a
		// snapshot install and the log's reset left older ones): the
		// leader sends what follows.
		ents = nil
	}
	if err := n.mem.Append(ents); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	li, _ := n.mem.LastIndex()
	if c := hs.GetCommit(); c > li {
		// Entries are written (and synced) before the commit index that
		// covers them: a commit past the log means entries were lost.
		return fmt.Errorf("%w: raft dir %s: committed entries are missing: the hard state's commit index is %d, "+
			"the log and snapshot end at %d%s. %s", errWALCorrupt, st.dir, c, li, passedOver(st.passedOver), walRepair)
	}
	hs.Commit = new(max(hs.GetCommit(), n.snapIndex))
	if err := n.mem.SetHardState(hs); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	return nil
}

// raftConfig is the RawNode's configuration, from the state loadState
// read.
func (n *Node) raftConfig() *raft.Config {
	return &raft.Config{
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
		Logger:                    raftLog(n.cfg, n.log),
	}
}

// startTransport connects the transport to raft and starts it, with a
// stream to every member the restored configuration names.
func (n *Node) startTransport() {
	n.tr = newTransport(&n.st, n.log.With(zap.String("node_id", n.cfg.NodeID)))
	n.tr.self = n.id
	n.tr.selfAddr = cmp.Or(n.cfg.AdvertiseAddr, n.st.ln.Addr().String())
	n.tr.recv = func(m *raftpb.Message) { n.stepKick(true, m) }
	n.tr.unreachable = func(id uint64) { n.do(func() { n.rn.ReportUnreachable(id) }) }
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
}

// thread is the append or the apply thread: each time it is woken, it
// takes what q holds and does it under run, until the node stops. What
// kickAppend and kickApply do not do inline is left to it.
func (n *Node) thread(q *queue[*raftpb.Message], run *sync.Mutex, do func([]*raftpb.Message)) {
	for {
		select {
		case <-n.stop:
			return
		case <-q.wake:
		}
		run.Lock()
		do(q.take())
		run.Unlock()
	}
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

// FSM returns the node's state machine.
func (n *Node) FSM() *FSM { return n.fsm }

// ID returns the node's ID.
func (n *Node) ID() string { return n.cfg.NodeID }

// IsLeader reports whether this node is the leader and ready for
// commands (never after a failed write of its log: appendFailed).
func (n *Node) IsLeader() bool { return n.isReady.Load() && n.isLeaderState() && !n.appFailed.Load() }

func (n *Node) isLeaderState() bool {
	return raft.StateType(n.role.Load()) == raft.StateLeader
}

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
		n.failWaiters(ErrClosed, true)
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

// passedOver names the damaged snapshots a refusal follows from, if any.
func passedOver(files []string) string {
	if len(files) == 0 {
		return ""
	}
	return fmt.Sprintf(" (damaged snapshots passed over: %s)", strings.Join(files, ", "))
}
