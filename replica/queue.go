package replica

import (
	"sync"

	"go.etcd.io/raft/v3/raftpb"
)

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

func (q *propQueue) take() []*proposal {
	q.mu.Lock()
	ps := q.q
	q.q = nil
	q.mu.Unlock()
	return ps
}
