package backend

import (
	"context"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
)

// Local is a single node's engine as a Backend: every call runs in place
// at clock.Now (or Request.Now) with a fresh clock.Salt, and answers at
// once. It never returns pending and never calls a Later.
type Local struct{ eng *engine.Engine }

// NewLocal returns eng as a Backend.
func NewLocal(eng *engine.Engine) *Local { return &Local{eng: eng} }

// Submit runs r on the engine and answers at once.
func (b *Local) Submit(r *Request, sink engine.Sink, via engine.Via, _ Later) (rep Reply, pending bool, err error) {
	now := r.Now
	if now == 0 {
		now = clock.Now()
	}
	switch r.Op {
	case OpAcquire:
		rep.Outcome, err = b.eng.Acquire(now, acquireReq(r), sink)
	case OpEnqueue:
		rep.Outcome, err = b.eng.Enqueue(now, acquireReq(r))
	case OpWait:
		rep.Outcome, err = b.eng.Wait(now, r.Key, r.Owner, r.Timeout, sink)
	case OpRelease:
		err = b.eng.ReleaseVia(now, r.Key, r.Token, via)
	case OpRenew:
		rep.Outcome.TTL, err = b.eng.RenewAs(now, r.Key, r.Token, r.TTL, r.Owner)
	case OpDisconnect:
		b.eng.DisconnectVia(now, r.Owner, r.Release, via)
	case OpCancelWait:
		rep.OK = b.eng.CancelWait(now, r.Key, r.Owner)
	case OpOpenSession:
		err = b.eng.OpenSessionKeyed(now, r.Owner, r.TTL, r.MaxSessions, r.SessionKey)
	case OpCloseSession:
		rep.OK = b.eng.CloseSession(now, r.Owner)
	case OpBeginSession:
		rep.OK = b.eng.BeginSession(now, r.Owner)
	case OpAcquireSet:
		rep.Set, err = b.acquireSet(now, r)
	case OpCancelSet:
		rep.OK = b.eng.CancelSet(now, r.Key, r.Owner)
	default:
		err = engine.ErrBadRequest
	}
	return rep, false, err
}

// Do runs r on the engine.
func (b *Local) Do(r Request, sink engine.Sink) (Reply, error) {
	rep, _, err := b.Submit(&r, sink, nil, nil)
	return rep, err
}

func acquireReq(r *Request) engine.AcquireReq {
	return engine.AcquireReq{Key: r.Key, Owner: r.Owner, Limit: r.Limit, Mode: r.Mode, TTL: r.TTL,
		Timeout: r.Timeout, Salt: clock.Salt(), LockDelay: r.LockDelay}
}

// EndSessionAsync ends a request of owner's session, in place.
func (b *Local) EndSessionAsync(owner engine.OwnerID) { b.eng.EndSession(clock.Now(), owner) }

// Engine returns the engine.
func (b *Local) Engine() *engine.Engine { return b.eng }

// IsLeader reports true: a single node takes every mutation.
func (b *Local) IsLeader() bool { return true }

// LeaderAddrs returns no addresses: there is no other node to name.
func (b *Local) LeaderAddrs() Leader { return Leader{} }

// Replicated reports false: the state lives and ends with this process.
func (b *Local) Replicated() bool { return false }

// ClusterStatus returns nil: a single node has no raft state.
func (b *Local) ClusterStatus() any { return nil }

// Barrier returns nil at once: a single node's engine is the whole state.
func (b *Local) Barrier(context.Context) error { return nil }

// Ready returns nil: a single node serves once it is built.
func (b *Local) Ready() error { return nil }

// acquireSet runs an OpAcquireSet, its outcome in r.SetOut if given.
func (b *Local) acquireSet(now int64, r *Request) (*engine.SetOutcome, error) {
	out := r.SetOut
	if out == nil {
		out = new(engine.SetOutcome)
	}
	req := engine.SetReq{Keys: r.Keys, Owner: r.Owner, Limit: r.Limit, TTL: r.TTL, Timeout: r.Timeout,
		Salt: clock.Salt()}
	var err error
	*out, err = b.eng.AcquireSet(now, &req, r.SetSink)
	return out, err
}
