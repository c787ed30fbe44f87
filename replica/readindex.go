package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
)

// Linearizable reads (ReadBarrier) over etcd raft's ReadIndex. Barriers
// that arrive while a round waits to be sent join it: one ReadIndex
// answers them all. A round never takes in a barrier that began after it
// was sent (its index could predate that barrier's writes).

// errReadRetry fails a round whose request raft dropped or will never
// answer (the leader changed, or none was known when it was sent): its
// barriers try again with a new round, or fail when no leader is known.
var errReadRetry = errors.New("replica: read index round lost")

// readRound is one ReadIndex request and the barriers waiting on it.
type readRound struct {
	done    chan struct{} // closed once err is set (finishRead)
	err     error
	key     string // the request context raft carries (sendRead)
	index   uint64 // the leader's commit index, once raft answered
	waiters int    // barriers still waiting (leaveRead)
	over    bool   // done is closed
}

// readIndexes is the node's ReadIndex rounds. Lock order: Node.mu, then mu.
type readIndexes struct {
	mu     sync.Mutex
	next   *readRound            // open: barriers join it until the raft loop sends it
	sent   map[string]*readRound // sent, waiting for raft's answer
	parked []*readRound          // answered, waiting for the apply to reach their index
	low    atomic.Uint64         // the smallest parked index, 0 for none
	seq    uint64
}

// ReadBarrier returns once this node has applied every entry committed
// before the call, as the leader confirmed with a quorum of heartbeats
// (raft's ReadIndex): reads that follow see every write acknowledged
// before the call, on a follower or learner as on the leader.
//
// It fails with *NotLeaderError when no leader is known, with ctx's error
// when the confirmation or the apply does not come in time (the node must
// not answer from its state then), and ErrClosed once the node stops.
func (n *Node) ReadBarrier(ctx context.Context) error {
	for {
		if n.stopping() {
			return ErrClosed
		}
		// A node whose log write failed applies nothing more: its state
		// would never catch up to the read index.
		if n.lead.Load() == raft.None || n.appFailed.Load() {
			return n.notLeader()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		r := n.joinRead()
		select {
		case <-r.done:
		case <-ctx.Done():
			n.leaveRead(r)
			return ctx.Err()
		case <-n.stop:
			n.leaveRead(r)
			return ErrClosed
		}
		if !errors.Is(r.err, errReadRetry) {
			return r.err
		}
	}
}

// joinRead adds a barrier to the open round, opening one (and asking the
// raft loop to send it) if none is.
func (n *Node) joinRead() *readRound {
	ri := &n.reads
	ri.mu.Lock()
	defer ri.mu.Unlock()
	r := ri.next
	if r == nil {
		r = &readRound{done: make(chan struct{})}
		ri.next = r
		n.do(n.sendRead)
	}
	r.waiters++
	return r
}

// sendRead closes the open round to new barriers and hands it to raft
// with a request context no other node or process uses. Raft loop, under
// mu.
func (n *Node) sendRead() {
	ri := &n.reads
	ri.mu.Lock()
	r := ri.next
	ri.next = nil
	if r == nil || r.waiters == 0 {
		ri.mu.Unlock()
		return
	}
	if n.lead.Load() == raft.None {
		finishRead(r, errReadRetry) // raft would drop it
		ri.mu.Unlock()
		return
	}
	ri.seq++
	rctx := make([]byte, 16)
	binary.BigEndian.PutUint64(rctx, n.origin)
	binary.BigEndian.PutUint64(rctx[8:], ri.seq)
	r.key = string(rctx)
	if ri.sent == nil {
		ri.sent = make(map[string]*readRound)
	}
	ri.sent[r.key] = r
	ri.mu.Unlock()
	n.rn.ReadIndex(rctx)
}

// readStates takes raft's answers to sent rounds: each waits until the
// apply reaches its index. Under mu (drainReady).
func (n *Node) readStates(states []raft.ReadState) {
	ri := &n.reads
	ri.mu.Lock()
	defer ri.mu.Unlock()
	added := false
	for _, rs := range states {
		r := ri.sent[string(rs.RequestCtx)]
		if r == nil {
			continue // every barrier on it left
		}
		delete(ri.sent, r.key)
		r.index = rs.Index
		ri.parked = append(ri.parked, r)
		added = true
	}
	if added {
		n.releaseReadsLocked()
	}
}

// readsLost fails the rounds raft has not answered: the leadership or the
// leader they were sent to changed, and raft dropped them. Their barriers
// try again. Under mu (softState).
func (n *Node) readsLost() {
	ri := &n.reads
	ri.mu.Lock()
	defer ri.mu.Unlock()
	for k, r := range ri.sent {
		delete(ri.sent, k)
		finishRead(r, errReadRetry)
	}
}

// readsApplied finishes the parked rounds the apply has reached. Called
// by whoever applies, after each batch; cheap when none waits.
func (n *Node) readsApplied() {
	low := n.reads.low.Load()
	if low == 0 || low > n.fsm.AppliedIndex() {
		return
	}
	n.reads.mu.Lock()
	n.releaseReadsLocked()
	n.reads.mu.Unlock()
}

// releaseReadsLocked finishes the parked rounds at or below the applied
// index and records the smallest index still parked. low is stored
// before the applied index is read, and the apply stores its index before
// it reads low (readsApplied): one of the two sees the other's.
func (n *Node) releaseReadsLocked() {
	ri := &n.reads
	for {
		low := uint64(0)
		for _, r := range ri.parked {
			if low == 0 || r.index < low {
				low = max(r.index, 1)
			}
		}
		ri.low.Store(low)
		applied := n.fsm.AppliedIndex()
		if low == 0 || low > applied {
			return
		}
		ri.parked = slices.DeleteFunc(ri.parked, func(r *readRound) bool {
			if r.index <= applied {
				finishRead(r, nil)
			}
			return r.index <= applied
		})
	}
}

// leaveRead withdraws a barrier that stopped waiting; a round no barrier
// waits on any more is forgotten.
func (n *Node) leaveRead(r *readRound) {
	ri := &n.reads
	ri.mu.Lock()
	defer ri.mu.Unlock()
	r.waiters--
	if r.waiters > 0 || r.over {
		return
	}
	if ri.next == r {
		ri.next = nil
	}
	if r.key != "" && ri.sent[r.key] == r {
		delete(ri.sent, r.key)
	}
	if i := slices.Index(ri.parked, r); i >= 0 {
		ri.parked = slices.Delete(ri.parked, i, i+1)
	}
	finishRead(r, errReadRetry)
}

// finishRead answers a round's barriers, once. Under readIndexes.mu.
func finishRead(r *readRound, err error) {
	if r.over {
		return
	}
	r.over = true
	r.err = err
	close(r.done)
}
