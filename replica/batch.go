//go:build hashicorpraft

package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/latchd/latchd/engine"
)

// Group commit at the command level. hashicorp/raft already writes the
// entries that arrive together in one fsync, but every entry still costs
// its own future, msgpack encoding on the wire, store write and cache slot
// on every node. The batcher puts the commands of many clients into one
// entry: a proposal that finds a free slot goes out at once (no added
// latency when the cluster is idle); while maxInflight entries are in
// flight, proposals queue and leave together in the next one.
//
// One entry in flight beat two, four, eight and 32 on a 3-node cluster of
// processes on a 2-core machine (bench/cluster.sh, 10 and 100 workers):
// a second entry does not overlap the first's disk write much (the
// leader's raft loop writes its log before it replicates), it only halves
// the batch and doubles the per-entry work on every node.
//
// A batch entry is batchVersion, a uvarint count, then each command's
// AppendCommand encoding, uvarint-length-prefixed. The FSM answers it with
// a batchReply, one Reply per command, in order.

const maxInflight = 1 // batch entries proposed and not yet committed

// proposal is one command waiting in the batcher.
type proposal struct {
	c     Command
	parks bool // registered a Sink under c.ReqID
	done  chan proposalResult
}

type proposalResult struct {
	r   Reply
	err error
}

type batcher struct {
	n        *Node
	mu       sync.Mutex
	queue    []*proposal
	inflight int
}

// submit queues p and, if a slot is free, sends what is queued.
func (b *batcher) submit(p *proposal) {
	b.mu.Lock()
	b.queue = append(b.queue, p)
	if b.inflight >= maxInflight {
		b.mu.Unlock()
		return // the entry in flight that finishes first takes it
	}
	b.inflight++
	batch := b.take()
	b.mu.Unlock()
	b.send(batch)
}

// take removes up to maxBatch proposals from the queue. b.mu is held.
func (b *batcher) take() []*proposal {
	n := min(len(b.queue), maxBatch)
	batch := make([]*proposal, n)
	copy(batch, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// send proposes one batch entry and waits for it on a goroutine; then the
// slot goes to what queued meanwhile, or is freed.
func (b *batcher) send(batch []*proposal) {
	data := make([]byte, 0, 1+binary.MaxVarintLen64+64*len(batch))
	data = append(data, batchVersion)
	data = binary.AppendUvarint(data, uint64(len(batch)))
	var one []byte
	for _, p := range batch {
		one = AppendCommand(one[:0], &p.c)
		data = binary.AppendUvarint(data, uint64(len(one)))
		data = append(data, one...)
	}
	f := b.n.raft.Apply(data, b.n.cfg.ApplyTimeout)
	go func() {
		b.finish(batch, f)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		next := b.take()
		b.mu.Unlock()
		b.send(next)
	}()
}

// finish hands each proposal of a committed (or failed) batch its answer.
func (b *batcher) finish(batch []*proposal, f raft.ApplyFuture) {
	if err := b.n.wait(f); err != nil {
		err = b.n.applyError(err)
		for _, p := range batch {
			if p.parks {
				b.n.fsm.unregister(p.c.ReqID)
			}
			p.done <- proposalResult{err: err}
		}
		return
	}
	replies, ok := f.Response().(batchReply)
	for i, p := range batch {
		var r Reply
		if ok && i < len(replies) {
			r = replies[i]
		} else {
			r.Err = ErrBadCommand
		}
		if p.parks && (r.Err != nil || r.Outcome.Result != engine.Queued) {
			b.n.fsm.unregister(p.c.ReqID)
		}
		p.done <- proposalResult{r: r}
	}
}

// wait is f.Error(), cut short by Shutdown. raft answers an entry when it
// commits, is refused or leadership is lost, but an entry committed in the
// instant raft shuts down can be left unanswered, and Shutdown must never
// wait for it: the entry's fate is then unknown (ErrClosed).
func (n *Node) wait(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-n.stop:
		select {
		case err := <-done: // answered in the same instant: prefer the answer
			return err
		default:
			return raft.ErrRaftShutdown
		}
	}
}

// applyError maps raft's error for an entry to the Node's.
func (n *Node) applyError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return n.notLeader() // refused before it entered the log
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrUnknownOutcome // in the log, maybe committed later
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return context.DeadlineExceeded // never entered the log
	}
	return fmt.Errorf("replica: apply: %w", err)
}
