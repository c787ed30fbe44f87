//go:build hashicorpraft

package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/clock"
)

// Storage is what a Node keeps its raft state in and talks through.
type Storage struct {
	Logs      raft.LogStore
	Stable    raft.StableStore
	Snapshots raft.SnapshotStore
	Transport raft.Transport
	// Close, if set, runs after raft has shut down (closes files, sockets).
	Close func() error
}

// InmemStorage returns in-memory stores over trans, for tests.
func InmemStorage(trans raft.Transport) Storage {
	st := raft.NewInmemStore()
	return Storage{Logs: st, Stable: st, Snapshots: raft.NewInmemSnapshotStore(), Transport: trans}
}

// logCacheSize is how many of the newest log entries the leader keeps in
// memory for replication: several full batches (MaxAppendEntries).
const logCacheSize = 4096

// DiskStorage opens cfg.RaftDir: the log in wal/ (see WAL), the stable
// store in raft.db (a bbolt file that also locks the directory; see
// BoltStore), every write fsynced before it is acknowledged, file
// snapshots, and a TCP transport on cfg.BindAddr. With
// cfg.AuthToken the transport admits only peers that prove they hold the
// same token, and proves it to the peers it dials (see docs/cluster.md);
// without it, it is raft's plain TCP transport. log receives, at warn, the
// refused connections (once per remote host).
func DiskStorage(cfg Config, log *zap.Logger) (Storage, error) {
	if cfg.RaftDir == "" || cfg.BindAddr == "" {
		return Storage{}, errors.New("replica: an on-disk node needs a raft dir and a bind address")
	}
	if err := os.MkdirAll(cfg.RaftDir, 0o700); err != nil {
		return Storage{}, fmt.Errorf("replica: %w", err)
	}
	hl := raftLogger(cfg, log)
	store, err := OpenBoltStore(filepath.Join(cfg.RaftDir, "raft.db"), time.Second)
	if err != nil {
		return Storage{}, err
	}
	wal, err := OpenWAL(filepath.Join(cfg.RaftDir, "wal"), 0)
	if err == nil {
		if cut := wal.Cut(); cut > 0 {
			log.Warn("raft log: cut an unfinished write off the tail", zap.Int64("bytes", cut))
		}
		err = moveLogs(store, wal)
	}
	if err != nil {
		if wal != nil {
			_ = wal.Close()
		}
		_ = store.Close() // the log's error is the one to report
		return Storage{}, err
	}
	closeStores := func() error { return errors.Join(wal.Close(), store.Close()) }
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.RaftDir, cfg.SnapshotRetain, hl.Named("snapshots"))
	if err != nil {
		_ = closeStores() // the snapshot store's error is the one to report
		return Storage{}, fmt.Errorf("replica: snapshot store: %w", err)
	}
	trans, err := newTransport(cfg, hl, log)
	if err != nil {
		_ = closeStores() // the transport's error is the one to report
		return Storage{}, err
	}
	// The leader reads back every entry it replicates, and followers read
	// what they apply: a cache of the newest entries saves a read each.
	logs, err := raft.NewLogCache(logCacheSize, wal)
	if err != nil {
		_ = trans.Close()
		_ = closeStores()
		return Storage{}, fmt.Errorf("replica: log cache: %w", err)
	}
	return Storage{Logs: logs, Stable: store, Snapshots: snaps, Transport: trans, Close: func() error {
		return errors.Join(trans.Close(), closeStores())
	}}, nil
}

// moveLogs moves the entries a raft dir written before the WAL kept in
// bbolt into the WAL, so an upgraded node keeps its log. While bbolt holds
// entries it is the log: the WAL is cleared and filled from it (and
// fsynced) before bbolt lets go of them, so a crash at any point leaves a
// whole log in bbolt or in the WAL, and the next start finishes the move.
func moveLogs(from *BoltStore, to *WAL) error {
	first, err := from.FirstIndex()
	if err != nil || first == 0 {
		return err
	}
	last, err := from.LastIndex()
	if err != nil {
		return err
	}
	if err := to.DeleteRange(0, math.MaxUint64); err != nil {
		return fmt.Errorf("replica: moving the log out of raft.db: %w", err)
	}
	// bbolt's log can have a gap (raft left one after a snapshot
	// install); the WAL keeps what follows the last gap, as raft would.
	var batch []*raft.Log
	flush := func() error {
		err := to.StoreLogs(batch)
		batch = batch[:0]
		return err
	}
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		err := from.GetLog(i, l)
		switch {
		case errors.Is(err, raft.ErrLogNotFound):
			err = flush()
		case err == nil:
			batch = append(batch, l)
			if len(batch) == 1024 {
				err = flush()
			}
		}
		if err != nil {
			return fmt.Errorf("replica: moving the log out of raft.db: %w", err)
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("replica: moving the log out of raft.db: %w", err)
	}
	return from.DeleteRange(first, last)
}

// raftLogger sends hashicorp/raft's log lines to log at their own levels
// (raft's TRACE and DEBUG at zap's debug), with raft's key/value pairs as
// fields, so --log-level warn still shows raft's warnings and errors.
// cfg.RaftLogLevel is raft's own floor on top of log's.
func raftLogger(cfg Config, log *zap.Logger) hclog.Logger {
	level := hclog.LevelFromString(cfg.RaftLogLevel)
	if cfg.RaftLogLevel == "off" {
		level = hclog.Off
	}
	// The base logger writes nothing; every line goes through the sink.
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "raft", Level: hclog.Off, Output: io.Discard})
	il.RegisterSink(&zapSink{log: log.With(zap.String("node_id", cfg.NodeID)), min: level})
	return il
}

// zapSink is an hclog.SinkAdapter writing to zap.
type zapSink struct {
	log *zap.Logger
	min hclog.Level
}

// zapLevel maps an hclog level to zap's.
func zapLevel(l hclog.Level) zapcore.Level {
	switch {
	case l >= hclog.Error:
		return zapcore.ErrorLevel
	case l == hclog.Warn:
		return zapcore.WarnLevel
	case l == hclog.Info:
		return zapcore.InfoLevel
	}
	return zapcore.DebugLevel
}

// Accept implements hclog.SinkAdapter.
func (s *zapSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	if s.min == hclog.Off || level < s.min || level == hclog.Off {
		return
	}
	ce := s.log.Check(zapLevel(level), msg)
	if ce == nil {
		return
	}
	fields := make([]zap.Field, 0, 1+len(args)/2)
	fields = append(fields, zap.String("module", name))
	for i := 0; i+1 < len(args); i += 2 {
		k, ok := args[i].(string)
		if !ok {
			k = fmt.Sprint(args[i])
		}
		fields = append(fields, zap.Any(k, args[i+1]))
	}
	if len(args)%2 == 1 {
		fields = append(fields, zap.Any("extra", args[len(args)-1]))
	}
	ce.Write(fields...)
}

// Node is one member of a latchd cluster: a raft.Raft over an FSM. Only
// the leader accepts commands, stamping each with its clock and its salts;
// it also runs expiry. Its methods are safe for concurrent use.
type Node struct {
	cfg    Config
	log    *zap.Logger
	raft   *raft.Raft
	fsm    *FSM
	st     Storage
	origin uint64
	seq    atomic.Uint64
	now    func() int64

	readyMu sync.Mutex
	ready   chan struct{} // closed while this node is leader and has restamped
	isReady atomic.Bool

	leaderChanges atomic.Uint64 // leaders observed (see Status)
	observer      *raft.Observer

	batch batcher // group commit of proposals

	stop      chan struct{}
	done      chan struct{} // run has returned
	watchDone chan struct{} // watchLeader has returned
	closeOnce sync.Once
	closeErr  error
}

// New starts a node on st (see InmemStorage and DiskStorage); log receives
// raft's log lines. With cfg.Bootstrap, an empty store gets cfg.Peers as
// its first configuration.
func New(cfg Config, log *zap.Logger, st Storage) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	origin := clock.Salt() | 1 // never 0: 0 means "no origin"
	fsm, err := NewFSM(cfg.Engine, origin)
	if err != nil {
		return nil, err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	rc.BatchApplyCh = true // group commit: concurrent proposals share a log write
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.Logger = raftLogger(cfg, log)
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	if cfg.Bootstrap {
		var servers []raft.Server
		for _, p := range cfg.Peers {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
		err := raft.BootstrapCluster(rc, st.Logs, st.Stable, st.Snapshots, st.Transport, raft.Configuration{Servers: servers})
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return nil, fmt.Errorf("replica: bootstrap: %w", err)
		}
	}
	r, err := raft.NewRaft(rc, fsm, st.Logs, st.Stable, st.Snapshots, st.Transport)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	n := &Node{cfg: cfg, log: log, raft: r, fsm: fsm, st: st, origin: origin, now: clock.Now,
		ready: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}), watchDone: make(chan struct{})}
	obs := make(chan raft.Observation, 64)
	n.observer = raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	r.RegisterObserver(n.observer)
	go n.watchLeader(obs)
	n.batch.n = n
	go n.run()
	return n, nil
}

// FSM returns the node's state machine.
func (n *Node) FSM() *FSM { return n.fsm }

// Raft returns the underlying raft node, for membership changes and
// observation.
func (n *Node) Raft() *raft.Raft { return n.raft }

// ID returns the node's ID.
func (n *Node) ID() string { return n.cfg.NodeID }

// AnswerRunners: this build's Node ignores an AnswerRunner.
const AnswerRunners = false

// SetAnswerRunner reports false: this build answers its batches'
// proposers on raft's FSM goroutine.
func (n *Node) SetAnswerRunner(AnswerRunner) bool { return false }

// IsLeader reports whether this node is the leader and ready for commands.
func (n *Node) IsLeader() bool { return n.isReady.Load() && n.raft.State() == raft.Leader }

// Leader returns what this node knows of the leader (empty if none).
//
// The client address is the one the leader wrote into the log in its
// Restamp entry, the first of every leadership, if this node has applied
// one from it; else the one cfg.Peers gives it, if any. Every node that
// ever leads announces its own address that way, so a node added at run
// time needs no client address in AddVoter. Until a follower has applied
// the new leader's Restamp (a few milliseconds, or the catch-up of a node
// far behind) and with no static Peers entry, ClientAddr is empty while
// LeaderID is not.
//
// The REST address (HTTPAddr) comes from the leader's Restamp only (Peers
// carry none), or from this node's own Config when it is the leader.
func (n *Node) Leader() NotLeaderError {
	addr, id := n.raft.LeaderWithID()
	e := NotLeaderError{LeaderID: string(id), RaftAddr: string(addr)}
	if id == "" {
		return e
	}
	e.ClientAddr = n.fsm.LeaderClientAddr(string(id))
	e.HTTPAddr = n.fsm.LeaderHTTPAddr(string(id))
	if e.HTTPAddr == "" && string(id) == n.cfg.NodeID {
		e.HTTPAddr = n.cfg.HTTPAddr // elected, not yet restamped
	}
	if e.ClientAddr == "" {
		for _, p := range n.cfg.Peers {
			if p.ID == string(id) {
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

// Shutdown stops the node: raft shuts down (a leader steps down without
// handing over), the expiry loop ends, storage is closed.
func (n *Node) Shutdown() error {
	n.closeOnce.Do(func() {
		close(n.stop)
		<-n.done
		<-n.watchDone
		n.raft.DeregisterObserver(n.observer)
		n.closeErr = n.raft.Shutdown().Error()
		if n.st.Close != nil {
			n.closeErr = errors.Join(n.closeErr, n.st.Close())
		}
	})
	return n.closeErr
}

// run is the node's one goroutine: on winning an election it proposes a
// Restamp before taking commands, and while leader it proposes an Expire
// whenever the engine has a deadline due. Followers never run expiry: an
// expiry is a state change like any other, so it comes through the log.
func (n *Node) run() {
	defer close(n.done)
	tick := time.NewTicker(n.cfg.ExpireEvery)
	defer tick.Stop()
	stamped := false     // this leadership has restamped
	var stampTerm uint64 // the term it restamped in
	for {
		select {
		case <-n.stop:
			n.setReady(false)
			return
		case <-n.raft.LeaderCh():
			// Any transition (even true after true: lost and regained in
			// between) needs a fresh Restamp.
			stamped = false
			n.setReady(false)
		case <-tick.C:
		}
		if n.raft.State() != raft.Leader {
			stamped = false
			n.setReady(false)
			continue
		}
		if stamped && n.raft.CurrentTerm() != stampTerm {
			// Lost and regained between two looks, its LeaderCh signals
			// dropped (raft does not block to deliver them): another
			// leader may have written in between, so restamp.
			stamped = false
			n.setReady(false)
		}
		if !stamped {
			term := n.raft.CurrentTerm()
			c := Command{Op: OpRestamp, Key: []byte(n.cfg.NodeID), Addr: n.cfg.ClientAddr, HTTPAddr: n.cfg.HTTPAddr,
				Token: fence.Token{Fence: n.fenceFloor()}}
			if _, err := n.apply(context.Background(), &c, nil); err != nil || n.raft.CurrentTerm() != term {
				continue // lost leadership, or a timeout: try again next tick
			}
			stamped, stampTerm = true, term
			n.setReady(true)
		}
		now := n.now()
		if n.fsm.Engine().NextDeadline() <= now {
			c := Command{Op: OpExpire}
			_, _ = n.apply(context.Background(), &c, nil) // retried next tick if it failed
		}
	}
}

// fenceFloor is the fence floor a new leader writes into its Restamp: its
// wall clock in nanoseconds, or Config.FenceFloor when higher. So a fresh
// cluster's first fence is above the clock at its bootstrap, like a
// single node's, and a rebuilt cluster's fences stay above the old one's.
func (n *Node) fenceFloor() uint64 {
	return max(uint64(max(n.now(), 0)), n.cfg.FenceFloor)
}

// ProposeFunc: see the etcd Node's. Here a goroutine waits on Propose.
func (n *Node) ProposeFunc(c Command, sink engine.Sink, done func(Reply, error)) error {
	if !n.IsLeader() {
		return n.notLeader()
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		done(n.Propose(ctx, c, sink))
	}()
	return nil
}

// Propose stamps c (Now from the leader's clock, a fresh Salt for Acquire
// and Enqueue, this node's Origin and a new ReqID), appends it to the log
// (in one entry with other proposals that wait at the same time: see
// batcher), and returns what applying it answered, the engine's error
// included.
//
// sink, for an Acquire or Wait, hears the final Outcome of a request that
// came back Queued, once, on raft's FSM goroutine; it may hear it before
// Propose returns. It must not block.
//
// A node that is not the leader returns a *NotLeaderError; so does a new
// leader that has not yet restamped when ctx ends. ErrUnknownOutcome (the
// entry was logged, then leadership was lost) and ErrClosed leave the
// command's fate unknown: it may still be applied. ctx bounds the wait for
// a new leader's restamp and is checked once more before the command is
// queued; after that the wait ends when raft answers the entry: committed,
// refused, leadership lost, or not taken in within ApplyTimeout.
func (n *Node) Propose(ctx context.Context, c Command, sink engine.Sink) (Reply, error) {
	p, err := n.newProposal(ctx, c, sink)
	if err != nil {
		return Reply{}, err
	}
	n.batch.submit(p) // group commit: see batcher
	res := <-p.done   // raft answers every entry: committed, refused, or leadership lost
	if res.err != nil {
		return Reply{}, res.err
	}
	return res.r, res.r.Err
}

// isLeaderState reports whether raft has this node as leader (ready for
// commands or still restamping).
func (n *Node) isLeaderState() bool { return n.raft.State() == raft.Leader }

// apply appends c and waits for its Reply. It sets Origin and ReqID.
func (n *Node) apply(ctx context.Context, c *Command, sink engine.Sink) (Reply, error) {
	c.Origin = n.origin
	c.ReqID = n.seq.Add(1)
	if c.Op == OpRestamp || c.Op == OpExpire {
		c.Now = n.now()
	}
	parks := sink != nil && (c.Op == OpAcquire || c.Op == OpWait)
	if parks {
		n.fsm.register(c.ReqID, sink)
	}
	timeout := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			if parks {
				n.fsm.unregister(c.ReqID)
			}
			return Reply{}, ctx.Err()
		}
	}
	f := n.raft.Apply(AppendCommand(nil, c), timeout)
	if err := n.wait(f); err != nil {
		if parks {
			n.fsm.unregister(c.ReqID)
		}
		return Reply{}, n.applyError(err)
	}
	r, _ := f.Response().(Reply)
	if parks && (r.Err != nil || r.Outcome.Result != engine.Queued) {
		n.fsm.unregister(c.ReqID)
	}
	return r, nil
}

// EndSessionAsync proposes engine.EndSession and returns at once: the
// REST API ends a session's request after it has its answer, and waiting
// for the commit would hold the response back by a round trip. The batcher
// keeps proposals in order, so the next request's BeginSession follows
// it in the log. If it is lost (this node is not the ready leader, or
// leadership changes before it commits) the session stays busy until the
// next leader's restamp makes every session idle.
func (n *Node) EndSessionAsync(owner engine.OwnerID) {
	if !n.isReady.Load() {
		return
	}
	c := Command{Op: OpEndSession, Owner: owner, Now: n.now(), Origin: n.origin, ReqID: n.seq.Add(1)}
	n.batch.submit(&proposal{c: c, done: make(chan proposalResult, 1)}) // nobody reads: buffered
}
