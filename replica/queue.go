package replica

import "sync"

// queue is an unbounded FIFO with a one-slot wake-up channel for its
// consumer: push adds and wakes it, add only adds (the caller signals
// later, see kickApply).
type queue[T any] struct {
	mu   sync.Mutex
	q    []T
	wake chan struct{}
}

func (q *queue[T]) init() { q.wake = make(chan struct{}, 1) }

func (q *queue[T]) push(xs ...T) {
	q.add(xs...)
	q.signal()
}

// pushBelow pushes x unless the queue holds max items already, and
// reports whether it did.
func (q *queue[T]) pushBelow(max int, x T) bool {
	q.mu.Lock()
	ok := len(q.q) < max
	if ok {
		q.q = append(q.q, x)
	}
	q.mu.Unlock()
	if ok {
		q.signal()
	}
	return ok
}

func (q *queue[T]) add(xs ...T) {
	q.mu.Lock()
	q.q = append(q.q, xs...)
	q.mu.Unlock()
}

func (q *queue[T]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q)
}

func (q *queue[T]) take() []T {
	q.mu.Lock()
	xs := q.q
	q.q = nil
	q.mu.Unlock()
	return xs
}

// putBack returns xs, taken and not used, to the front of the queue.
func (q *queue[T]) putBack(xs []T) {
	q.mu.Lock()
	q.q = append(xs, q.q...)
	q.mu.Unlock()
}

// scan calls f on the queued items from index from on and returns the
// queue's length.
func (q *queue[T]) scan(from int, f func(T)) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, x := range q.q[min(from, len(q.q)):] {
		f(x)
	}
	return len(q.q)
}
