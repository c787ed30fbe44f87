package replica

import (
	"context"
	"encoding/binary"

	"go.etcd.io/raft/v3"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
)

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

type proposalResult struct {
	r   Reply
	err error
}

// Propose stamps c (the leader's clock, a Salt for Acquire and Enqueue,
// this node's Origin and a new ReqID), appends it to the log (sharing an
// entry with proposals that wait alongside) and returns what applying it
// answered, the engine's error included.
//
// sink, for an Acquire or Wait that came back Queued, hears its final
// Outcome once, on the applying goroutine, maybe before Propose returns.
// It must not block.
//
// A follower, or a new leader not yet restamped when ctx ends, returns a
// *NotLeaderError. ErrUnknownOutcome and ErrClosed leave the command's
// fate unknown: it may still be applied. ctx bounds only the wait for the
// restamp and the queueing; then the wait ends when the entry is applied,
// leadership is lost or the node stops.
func (n *Node) Propose(ctx context.Context, c Command, sink engine.Sink) (Reply, error) {
	p, err := n.newProposal(ctx, c, sink)
	if err != nil {
		return Reply{}, err
	}
	r, err := n.wait(p)
	if err != nil {
		return Reply{}, err
	}
	return r, r.Err
}

// wait submits p and waits for its answer.
func (n *Node) wait(p *proposal) (Reply, error) {
	n.submit(p)
	select {
	case res := <-p.done:
		return res.r, res.err
	case <-n.stop:
		return Reply{}, ErrClosed
	}
}

// stamp gives c this node's Origin, a new ReqID and the time.
func (n *Node) stamp(c *Command) {
	c.Now = n.now()
	c.Origin = n.origin
	c.ReqID = n.seq.Add(1)
}

// ProposeFunc proposes c like Propose without blocking, for an event loop
// that cannot spare a goroutine per caller: done gets Propose's outcome
// exactly once, on one of the node's goroutines (possibly under raft's
// lock) or the AnswerRunner's, so it must not block or call back into the
// node synchronously. A follower, or a leader not yet restamped, answers
// *NotLeaderError at once and done is not called. After Shutdown begins,
// an unapplied proposal hears ErrClosed.
func (n *Node) ProposeFunc(c Command, sink engine.Sink, done func(Reply, error)) error {
	p, err := n.newProposal(nil, c, sink)
	if err != nil {
		return err
	}
	p.cb = done
	n.submit(p)
	return nil
}

// EndSessionAsync proposes engine.EndSession and returns at once.
func (n *Node) EndSessionAsync(owner engine.OwnerID) {
	if !n.isReady.Load() {
		return
	}
	c := Command{Op: OpEndSession, Owner: owner}
	n.stamp(&c)
	n.submit(&proposal{c: c, done: make(chan proposalResult, 1)})
}

// newProposal is what Propose and ProposeFunc share: it refuses a command
// that is not a client's, answers not_leader on a follower, waits (within
// ctx; never with a nil one) for a new leader's restamp, stamps c and
// registers sink when the command may park.
func (n *Node) newProposal(ctx context.Context, c Command, sink engine.Sink) (*proposal, error) {
	if c.Op == OpRestamp || c.Op == 0 || c.Op >= opEnd {
		return nil, ErrBadCommand
	}
	if !n.isReady.Load() {
		if !n.isLeaderState() || ctx == nil || n.appFailed.Load() {
			return nil, n.notLeader()
		}
		select {
		case <-n.readyCh():
		case <-ctx.Done():
			return nil, n.notLeader()
		case <-n.stop:
			return nil, ErrClosed
		}
	}
	if ctx != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	n.stamp(&c)
	if c.Op.grants() {
		c.Salt = clock.Salt()
	}
	p := &proposal{c: c, parks: sink != nil && c.Op.parks()}
	if ctx != nil {
		p.done = make(chan proposalResult, 1) // Propose waits on it; ProposeFunc sets a callback
	}
	if p.parks {
		n.fsm.register(c.ReqID, sink)
	}
	return p, nil
}

// setReady publishes whether this node may take commands: a leader once
// restamped, not after losing leadership.
func (n *Node) setReady(ok bool) {
	n.readyMu.Lock()
	defer n.readyMu.Unlock()
	if ok == n.isReady.Load() {
		return
	}
	n.isReady.Store(ok)
	if ok {
		close(n.ready)
	} else {
		n.ready = make(chan struct{})
	}
}

// readyCh is closed once the node is ready for commands.
func (n *Node) readyCh() chan struct{} {
	n.readyMu.Lock()
	defer n.readyMu.Unlock()
	return n.ready
}

// submit queues a proposal and proposes at once if raft is free; else the
// goroutine holding it, or the raft loop, takes it with the others queued
// meanwhile (one entry for all of them: group commit).
func (n *Node) submit(p *proposal) {
	n.propQ.add(p)
	if n.mu.TryLock() {
		n.release(true)
	} else {
		n.propQ.signal()
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
			data = appendString(data, one)
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
		if p.parks && (err != nil || r.Err != nil || !queued(&r)) {
			n.fsm.unregister(p.c.ReqID)
		}
		if later != nil && p.cb != nil {
			*later = append(*later, laterAnswer{p: p, r: r})
			continue
		}
		p.answer(r, err)
	}
}
