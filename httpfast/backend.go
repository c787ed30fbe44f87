package httpfast

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/replica"
)

// backend is where the handlers send every engine mutation, and where
// they find the engine to read. A single node calls its engine directly
// (localBackend); in cluster mode each mutation is a raft proposal
// (clusterBackend). The handlers have one code path over either.
//
// The errors a localBackend returns are the engine's; a clusterBackend
// adds the replica's (*replica.NotLeaderError, replica.ErrUnknownOutcome,
// replica.ErrClosed, context errors), which Server.fail maps.
type backend interface {
	// openSession opens owner's session, refusing a new one with
	// engine.ErrMaxSessions when max (> 0) sessions are open; key is kept
	// with it (engine.OpenSessionKeyed).
	openSession(owner engine.OwnerID, ttl time.Duration, max int, key uint64) error
	closeSession(owner engine.OwnerID) (bool, error)
	beginSession(owner engine.OwnerID) (bool, error)
	endSession(owner engine.OwnerID)
	acquire(req engine.AcquireReq, sink engine.Sink) (engine.Outcome, error)
	enqueue(req engine.AcquireReq) (engine.Outcome, error)
	wait(key []byte, owner engine.OwnerID, timeout time.Duration, sink engine.Sink) (engine.Outcome, error)
	// cancelWait withdraws owner's parked request on key: its sink hears
	// Canceled, unless the request was answered first (engine.CancelWait).
	cancelWait(key []byte, owner engine.OwnerID) error
	release(key []byte, tok fence.Token) error
	renew(key []byte, tok fence.Token, ttl time.Duration, owner engine.OwnerID) (time.Duration, error)
	// disconnect withdraws everything owner waits for and, with release,
	// releases everything it holds. disconnect(owner, true) is
	// engine.DropOwner: DropOwner is defined as Disconnect(now, owner,
	// true), and the replica proposes exactly that (it has no DropOwner).
	// disconnect(owner, false) only withdraws the waits.
	disconnect(owner engine.OwnerID, release bool) error
	// engine returns the engine to read (stats, session TTLs, metrics).
	engine() *engine.Engine
}

// localBackend is a single node's engine, called directly at clock.Now().
type localBackend struct{ eng *engine.Engine }

func (b *localBackend) openSession(owner engine.OwnerID, ttl time.Duration, max int, key uint64) error {
	return b.eng.OpenSessionKeyed(clock.Now(), owner, ttl, max, key)
}

func (b *localBackend) closeSession(owner engine.OwnerID) (bool, error) {
	return b.eng.CloseSession(clock.Now(), owner), nil
}

func (b *localBackend) beginSession(owner engine.OwnerID) (bool, error) {
	return b.eng.BeginSession(clock.Now(), owner), nil
}

func (b *localBackend) endSession(owner engine.OwnerID) { b.eng.EndSession(clock.Now(), owner) }

func (b *localBackend) acquire(req engine.AcquireReq, sink engine.Sink) (engine.Outcome, error) {
	req.Salt = clock.Salt()
	return b.eng.Acquire(clock.Now(), req, sink)
}

func (b *localBackend) enqueue(req engine.AcquireReq) (engine.Outcome, error) {
	req.Salt = clock.Salt()
	return b.eng.Enqueue(clock.Now(), req)
}

func (b *localBackend) wait(key []byte, owner engine.OwnerID, timeout time.Duration, sink engine.Sink) (engine.Outcome, error) {
	return b.eng.Wait(clock.Now(), key, owner, timeout, sink)
}

func (b *localBackend) cancelWait(key []byte, owner engine.OwnerID) error {
	b.eng.CancelWait(clock.Now(), key, owner)
	return nil
}

func (b *localBackend) release(key []byte, tok fence.Token) error {
	return b.eng.Release(clock.Now(), key, tok)
}

func (b *localBackend) renew(key []byte, tok fence.Token, ttl time.Duration, owner engine.OwnerID) (time.Duration, error) {
	return b.eng.RenewAs(clock.Now(), key, tok, ttl, owner)
}

func (b *localBackend) disconnect(owner engine.OwnerID, release bool) error {
	b.eng.Disconnect(clock.Now(), owner, release)
	return nil
}

func (b *localBackend) engine() *engine.Engine { return b.eng }

// proposeWait bounds how long a proposal waits for a new leader to finish
// taking over (its Restamp) before it is refused as not_leader.
const proposeWait = 2 * time.Second

// clusterBackend proposes every mutation through a replica.Node: the
// leader stamps its clock and salts, the log orders the request with the
// TCP clients' of every node, and a parked acquire or wait hears its
// outcome through the node's FSM (see replica.Node.Propose). Reads use
// the node's FSM engine, fetched on every call: a snapshot restore
// replaces it.
type clusterBackend struct {
	n   *replica.Node
	log *zap.Logger
}

func proposeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), proposeWait)
}

// openSession checks the cap against this node's replica before it
// proposes: the count is the sessions the leader has applied, so
// sessions proposed concurrently (on this leader, or by a previous leader
// whose entries are not applied yet) are not counted and the cap can be
// overshot by that many. The replicated OpenSession itself has no cap.
func (b *clusterBackend) openSession(owner engine.OwnerID, ttl time.Duration, max int, key uint64) error {
	if max > 0 && b.engine().Sessions() >= max {
		return engine.ErrMaxSessions
	}
	ctx, cancel := proposeCtx()
	defer cancel()
	return b.n.OpenSession(ctx, owner, ttl, key)
}

func (b *clusterBackend) closeSession(owner engine.OwnerID) (bool, error) {
	ctx, cancel := proposeCtx()
	defer cancel()
	return b.n.CloseSession(ctx, owner)
}

func (b *clusterBackend) beginSession(owner engine.OwnerID) (bool, error) {
	ctx, cancel := proposeCtx()
	defer cancel()
	return b.n.BeginSession(ctx, owner)
}

// endSession does not wait for the commit: the request it ends has its
// answer, and nobody could be told of a failure. If it is lost (leadership
// changed meanwhile) the session stays busy until the next leader's
// restamp makes it idle (see docs/cluster.md).
func (b *clusterBackend) endSession(owner engine.OwnerID) { b.n.EndSessionAsync(owner) }

func (b *clusterBackend) acquire(req engine.AcquireReq, sink engine.Sink) (engine.Outcome, error) {
	ctx, cancel := proposeCtx()
	defer cancel()
	return b.n.Acquire(ctx, req, sink)
}

func (b *clusterBackend) enqueue(req engine.AcquireReq) (engine.Outcome, error) {
	ctx, cancel := proposeCtx()
	defer cancel()
	return b.n.Enqueue(ctx, req)
}

func (b *clusterBackend) wait(key []byte, owner engine.OwnerID, timeout time.Duration, sink engine.Sink) (engine.Outcome, error) {
	ctx, cancel := proposeCtx()
	defer cancel()
	return b.n.Wait(ctx, key, owner, timeout, sink)
}

func (b *clusterBackend) cancelWait(key []byte, owner engine.OwnerID) error {
	ctx, cancel := proposeCtx()
	defer cancel()
	_, err := b.n.CancelWait(ctx, key, owner)
	return err
}

func (b *clusterBackend) release(key []byte, tok fence.Token) error {
	ctx, cancel := proposeCtx()
	defer cancel()
	return b.n.Release(ctx, key, tok)
}

func (b *clusterBackend) renew(key []byte, tok fence.Token, ttl time.Duration, owner engine.OwnerID) (time.Duration, error) {
	ctx, cancel := proposeCtx()
	defer cancel()
	return b.n.Renew(ctx, key, tok, ttl, owner)
}

// disconnect proposes replica's Disconnect, which applies
// engine.Disconnect(now, owner, release): with release true that is
// engine.DropOwner.
func (b *clusterBackend) disconnect(owner engine.OwnerID, release bool) error {
	ctx, cancel := proposeCtx()
	defer cancel()
	err := b.n.Disconnect(ctx, owner, release)
	if err != nil {
		if ce := b.log.Check(zap.DebugLevel, "disconnect not logged"); ce != nil {
			ce.Write(zap.Uint64("owner", uint64(owner)), zap.Bool("release", release), zap.Error(err))
		}
	}
	return err
}

func (b *clusterBackend) engine() *engine.Engine { return b.n.FSM().Engine() }
