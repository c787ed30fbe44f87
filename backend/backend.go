package backend

import (
	"context"
	"errors"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

// Backend is where a front end sends every engine mutation and finds the
// engine to read. Its errors are the engine's, and on a replicated
// backend also *NotLeaderError, ErrUnknownOutcome and context errors (the
// backend's own bound on a wait).
type Backend interface {
	// Submit runs *r. It answers at once (pending false) or later
	// (pending true): l then hears the reply exactly once, on another
	// goroutine, and must not block. sink hears a parked Acquire's or
	// Wait's outcome; via, if not nil, receives the Sinks a single
	// node's Release or Disconnect calls in place (engine.Via). r is not
	// kept: it is a pointer so that an event loop can reuse one.
	Submit(r *Request, sink engine.Sink, via engine.Via, l Later) (rep Reply, pending bool, err error)
	// Do runs r and waits for its reply, within a bound of the backend's
	// own on a replicated backend (then it returns a context error).
	Do(r Request, sink engine.Sink) (Reply, error)
	// EndSessionAsync ends a request of owner's session
	// (engine.EndSession) without waiting for it to be applied.
	EndSessionAsync(owner engine.OwnerID)
	// Engine returns the engine to read (stats, session TTLs, metrics):
	// on a replicated backend the local replica's, which a snapshot
	// restore replaces, so fetch it on every use.
	Engine() *engine.Engine
	// IsLeader reports whether this node takes mutations now. A single
	// node always does.
	IsLeader() bool
	// LeaderAddrs returns what this node knows of the leader's
	// addresses, for a not_leader answer.
	LeaderAddrs() Leader
	// Replicated reports whether the state outlives this process: owner
	// IDs must then be unique across processes, and a front end that
	// stops leaves its clients' grants and sessions to the next leader.
	Replicated() bool
	// ClusterStatus returns the node's raft state for stats (a value
	// encoding/json can encode), or nil on a single node.
	ClusterStatus() any
	// Ready returns why the node cannot serve yet, or nil.
	Ready() error
	// Barrier returns once Engine reflects every mutation acknowledged
	// (by any node) before the call, so that a read after it is
	// linearizable. On a replicated node it fails with *NotLeaderError
	// or ctx's error when it cannot confirm that in time; the caller
	// must not answer from Engine then.
	Barrier(ctx context.Context) error
}

// Later hears the reply of a request Submit answered as pending.
type Later interface {
	Answer(rep Reply, err error)
}

// Op names a mutation.
type Op uint8

// Ops: one engine call each.
const (
	OpAcquire      Op = iota + 1 // engine.Acquire: Key, Owner, Limit, TTL, Timeout, LockDelay
	OpEnqueue                    // engine.Enqueue: Key, Owner, Limit, TTL, LockDelay
	OpWait                       // engine.Wait: Key, Owner, Timeout
	OpRelease                    // engine.Release: Key, Token
	OpRenew                      // engine.RenewAs: Key, Token, TTL, Owner
	OpDisconnect                 // engine.Disconnect: Owner, Release
	OpCancelWait                 // engine.CancelWait: Key, Owner; Reply.OK
	OpOpenSession                // engine.OpenSessionKeyed: Owner, TTL, MaxSessions, SessionKey
	OpCloseSession               // engine.CloseSession: Owner; Reply.OK
	OpBeginSession               // engine.BeginSession: Owner; Reply.OK
	OpAcquireSet                 // engine.AcquireSet: Keys, Owner, Limit, TTL, Timeout; SetSink; Reply.Set
	OpCancelSet                  // engine.CancelSet: Key (the set's first), Owner; Reply.OK
)

// Request is one mutation and its inputs. The backend supplies the time
// and the token salt.
type Request struct {
	Op      Op
	Release bool   // Disconnect: release what Owner holds too
	Key     []byte // not kept after the call returns
	Owner   engine.OwnerID
	Limit   int
	Mode    engine.Mode // Acquire, Enqueue: ModeRead or ModeWrite for a read-write key
	TTL     time.Duration
	Timeout time.Duration
	Token   fence.Token
	// Keys are an AcquireSet's keys (views, not kept after the call);
	// SetSink hears a queued set's outcome; SetOut, if not nil, is where
	// a single node writes the reply's set outcome (Reply.Set points to
	// it), so that the call allocates nothing.
	Keys    [][]byte
	SetSink engine.SetSink
	SetOut  *engine.SetOutcome
	// MaxSessions caps the open sessions an OpenSession may find (0: no
	// cap); SessionKey is kept with the session.
	MaxSessions int
	SessionKey  uint64
	// ReqID is the client's request id for an Acquire, Enqueue, Wait,
	// Release, Renew or AcquireSet (nil for none; not kept after the call
	// returns).
	// A replicated backend answers a retry with the same id as it
	// answered the first (replica/dedup.go); a single node, where no
	// outcome is ever unknown to a live connection, ignores it.
	ReqID []byte
	// Scope is the session a TCP request with a ReqID acts for (0: none),
	// whose ids a replicated backend keeps apart from other clients'
	// (ScopeReqID). A REST front end scopes its ReqID itself.
	Scope engine.OwnerID
	// Client is the TCP connection that sent the request (0 for none),
	// for a replicated leader's batching; not part of the state.
	Client engine.OwnerID
	// Now is the front end's reading of clock.Now for this request, so
	// a batch of requests reads the clock once; 0: the backend reads it.
	// A single node uses it; a replicated leader stamps its own clock.
	Now int64
	// LockDelay is an Acquire's or Enqueue's own lock-delay
	// (engine.AcquireReq.LockDelay): 0 the engine's, < 0 none.
	LockDelay time.Duration
}

// Reply is what a request answered: Outcome for Acquire, Enqueue and
// Wait, Outcome.TTL (the lease length) for Renew, OK for CancelWait,
// CloseSession and BeginSession.
type Reply struct {
	Outcome engine.Outcome
	OK      bool
	Set     *engine.SetOutcome // OpAcquireSet: the set's outcome
}

// Leader is what a node knows of the leader's addresses; empty when it
// knows none (an election is running) or the leader serves none.
type Leader struct {
	ClientAddr string // where TCP clients reach it: error_not_leader names it
	HTTPAddr   string // where it serves the REST API
}

// NotLeaderError means this node does not take mutations: send them to
// the leader.
type NotLeaderError struct{ Leader Leader }

// Error says where the leader is.
func (e *NotLeaderError) Error() string {
	if e.Leader.ClientAddr == "" {
		return "backend: not leader; no leader known"
	}
	return "backend: not leader; leader is at " + e.Leader.ClientAddr
}

var (
	// ErrUnknownOutcome means the request may or may not take effect:
	// it entered the log and leadership was lost before it committed, or
	// the node closed under it.
	ErrUnknownOutcome = errors.New("backend: outcome unknown")
	// ErrUnknownMember means a membership change named no member.
	ErrUnknownMember = errors.New("backend: no such member")
)

// Admin is the optional companion of a replicated Backend, found on the
// same value: the cluster's membership and leadership, for the admin API.
// Its errors are Backend's, ErrUnknownMember and ctx's.
type Admin interface {
	IsLeader() bool
	LeaderAddrs() Leader
	ClusterStatus() any
	// Voters returns the latest configuration's members (JSON-encodable).
	Voters() any
	// HasMember reports whether id is in the latest configuration.
	HasMember(id string) bool
	// AddMember adds id at raftAddr as a voter, or a non-voting learner;
	// an existing member gets the new address or role.
	AddMember(ctx context.Context, id, raftAddr string, learner bool) error
	RemoveMember(ctx context.Context, id string) error
	// TransferLeader hands leadership to id ("": the most up-to-date).
	TransferLeader(ctx context.Context, id string) error
}

// AnswerBatcher is the optional companion of a Backend whose pending
// replies come in batches on its own goroutines: SetAnswerBatches makes
// it hand each batch of n replies (fn answers them all) to run, which
// reports whether it took the batch; nil undoes it. It reports whether
// the backend uses run.
type AnswerBatcher interface {
	SetAnswerBatches(run func(n int, fn func()) bool) bool
}
