package server

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// fakeLoop runs Execute's tasks on one goroutine, in order, like an
// event loop; stopped, it refuses them, and held, it takes them without
// running them (a loop that ends with tasks queued).
type fakeLoop struct {
	mu      sync.Mutex
	tasks   chan gnet.Runnable
	stopped bool
	held    bool
	calls   int
}

func newFakeLoop(t *testing.T) *fakeLoop {
	l := &fakeLoop{tasks: make(chan gnet.Runnable, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for r := range l.tasks {
			_ = r.Run(context.Background())
		}
	}()
	t.Cleanup(func() {
		l.mu.Lock()
		if !l.stopped {
			l.stopped = true
			close(l.tasks)
		}
		l.mu.Unlock()
		<-done
	})
	return l
}

func (l *fakeLoop) Execute(_ context.Context, r gnet.Runnable) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	switch {
	case l.stopped:
		return errors.New("engine in shutdown")
	case l.held:
		return nil // taken, never run
	}
	l.tasks <- r
	return nil
}

func (l *fakeLoop) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.stopped = true
		close(l.tasks)
	}
}

func (l *fakeLoop) Register(context.Context, net.Addr) (<-chan gnet.RegisteredResult, error) {
	return nil, errors.New("unused")
}
func (l *fakeLoop) Enroll(context.Context, net.Conn) (<-chan gnet.RegisteredResult, error) {
	return nil, errors.New("unused")
}
func (l *fakeLoop) Schedule(context.Context, gnet.Runnable, time.Duration) error {
	return errors.New("unused")
}
func (l *fakeLoop) Close(gnet.Conn) error { return nil }

// recorder notes which batches ran, in order.
type recorder struct {
	mu  sync.Mutex
	ran []int
	wg  sync.WaitGroup
}

// wait waits for every batch made, or fails t after 5 s.
func (r *recorder) wait(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("batches never ran")
	}
}

func (r *recorder) batch(i int) func() {
	r.wg.Add(1)
	return func() {
		r.mu.Lock()
		r.ran = append(r.ran, i)
		r.mu.Unlock()
		r.wg.Done()
	}
}

func TestAnswerQueueRunsBatchesOnTheLoopInOrder(t *testing.T) {
	l := newFakeLoop(t)
	q := newAnswerQueue(l)
	var r recorder
	for i := range 500 {
		if !q.put(answersOnLoopMin, r.batch(i)) {
			t.Fatal("put refused on a running loop")
		}
	}
	r.wait(t)
	want := make([]int, 500)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(r.ran, want) {
		t.Fatalf("batches ran out of order: %v", r.ran[:min(20, len(r.ran))])
	}
	l.mu.Lock()
	calls := l.calls
	l.mu.Unlock()
	if calls > 500 || calls < 1 {
		t.Fatalf("%d tasks for 500 batches", calls)
	}
}

// Batches put while a task is queued share it: one task, not one each.
func TestAnswerQueueSharesATask(t *testing.T) {
	l := newFakeLoop(t)
	l.held = true
	q := newAnswerQueue(l)
	var r recorder
	for i := range 10 {
		q.put(answersOnLoopMin, r.batch(i))
	}
	l.mu.Lock()
	calls := l.calls
	l.mu.Unlock()
	if calls != 1 {
		t.Fatalf("%d tasks for 10 batches put before the first ran, want 1", calls)
	}
	q.close() // the loop never ran its task: close runs the batches
	r.wait(t)
	if len(r.ran) != 10 || !slices.IsSorted(r.ran) {
		t.Fatalf("close ran %v", r.ran)
	}
}

// A loop that refuses tasks (shutting down): the batch runs on the
// caller, and so does what was queued before it.
func TestAnswerQueueRunsHereWhenTheLoopRefuses(t *testing.T) {
	l := newFakeLoop(t)
	q := newAnswerQueue(l)
	l.stop()
	var r recorder
	for i := range 3 {
		if !q.put(answersOnLoopMin, r.batch(i)) {
			t.Fatal("put refused before close")
		}
		if len(r.ran) != i+1 {
			t.Fatalf("batch %d did not run on the caller", i)
		}
	}
	if !slices.Equal(r.ran, []int{0, 1, 2}) {
		t.Fatalf("ran %v", r.ran)
	}
}

// After close, put refuses: the replica then answers on its own
// goroutine.
func TestAnswerQueueCloseRefuses(t *testing.T) {
	l := newFakeLoop(t)
	q := newAnswerQueue(l)
	q.close()
	ran := false
	if q.put(answersOnLoopMin, func() { ran = true }) || ran {
		t.Fatalf("put after close: accepted or ran it (%v)", ran)
	}
}

func TestAnswerQueueConcurrentPutAndClose(t *testing.T) {
	l := newFakeLoop(t)
	q := newAnswerQueue(l)
	var mu sync.Mutex
	ran, refused := 0, 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				if !q.put(answersOnLoopMin, func() { mu.Lock(); ran++; mu.Unlock() }) {
					mu.Lock()
					refused++
					mu.Unlock()
				}
			}
		})
	}
	l.stop()
	q.close()
	wg.Wait()
	// Every batch put was run exactly once: by the loop, by close, or
	// by a put that found the loop gone.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := ran + refused
		mu.Unlock()
		if n == 800 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ran %d + refused %d, want 800", ran, refused)
		}
		time.Sleep(time.Millisecond)
	}
}

// A small batch is the caller's to run: the loop would have to be woken
// for it.
func TestAnswerQueueLeavesSmallBatches(t *testing.T) {
	l := newFakeLoop(t)
	q := newAnswerQueue(l)
	ran := false
	if q.put(answersOnLoopMin-1, func() { ran = true }) || ran {
		t.Fatalf("a batch of %d: taken, or run (%v)", answersOnLoopMin-1, ran)
	}
	l.mu.Lock()
	calls := l.calls
	l.mu.Unlock()
	if calls != 0 {
		t.Fatalf("%d tasks for a small batch", calls)
	}
}
