package server

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
)

// A cluster leader's answers, on the event loop. Each applied entry
// answers a batch of clients; run as one task on the loop, the loop
// writes the burst itself and reads the commands that came back meanwhile
// in one poll, rather than the applying goroutine writing while the loop
// sleeps. Only with one event loop (else one loop would write every
// loop's answers), and only for at least answersOnLoopMin answers (a few
// are written sooner by the goroutine that has them).

// answerQueue runs a backend.AnswerBatcher's answer batches on an event
// loop, one gnet task for whatever is queued when it runs.
type answerQueue struct {
	el   gnet.EventLoop
	task gnet.Runnable
	on   atomic.Bool   // the backend took it
	ran  atomic.Uint64 // tasks run, for tests

	mu     sync.Mutex
	fns    []func() // queued batches, in log order
	spare  []func() // the slice the last task ran, for reuse
	queued bool     // a task is on the loop (or being put there) for fns
	closed bool     // the loops have stopped: put refuses
}

func newAnswerQueue(el gnet.EventLoop) *answerQueue {
	q := &answerQueue{el: el}
	q.task = gnet.RunnableFunc(q.run)
	return q
}

// answersOnLoopMin is the smallest batch put takes.
const answersOnLoopMin = 8

// put queues fn, which writes n answers, for the loop. It reports false
// for a batch under answersOnLoopMin and after close.
func (q *answerQueue) put(n int, fn func()) bool {
	if n < answersOnLoopMin {
		return false
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.fns = append(q.fns, fn)
	if q.queued {
		q.mu.Unlock()
		return true
	}
	q.queued = true
	q.mu.Unlock()
	if err := q.el.Execute(context.Background(), q.task); err != nil {
		// The loops are shutting down: what is queued runs here, in
		// order (a put after the take finds nothing queued and gets
		// here too).
		q.runQueued(false)
	}
	return true
}

// run is the loop's task.
func (q *answerQueue) run(context.Context) error {
	q.ran.Add(1)
	fns := q.runQueued(false)
	q.mu.Lock()
	if q.spare == nil {
		q.spare = fns[:0]
	}
	q.mu.Unlock()
	return nil
}

// close runs what is still queued, on the caller, and makes put refuse
// from then on: for Stop, once the loops have ended (a task they never
// ran would leave its clients, and Stop's wait for them, hanging). When
// Stop gave up waiting for the loops, a loop may still be running earlier
// batches meanwhile: harmless, as a connection has one proposal in flight
// at a time, so no two batches answer the same one.
func (q *answerQueue) close() { q.runQueued(true) }

// runQueued empties the queue, closing it first if closing, and runs what
// it held, in order. It returns the emptied slice, for reuse.
func (q *answerQueue) runQueued(closing bool) []func() {
	q.mu.Lock()
	q.closed = q.closed || closing
	fns := q.fns
	q.fns, q.spare = q.spare, nil
	q.queued = false
	q.mu.Unlock()
	for i, fn := range fns {
		fn()
		fns[i] = nil
	}
	return fns
}
