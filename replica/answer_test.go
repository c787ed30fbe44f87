package replica

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// An AnswerRunner gets every applied entry's ProposeFunc answers, in log
// order, and runs them where it likes; one that refuses has them run by
// the goroutine that applied the entry, as does nil; Propose's answers
// never go to it.
func TestAnswerRunner(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)

	// A runner that runs batches on its own goroutine, in order.
	fns := make(chan func(), 1024)
	var batches atomic.Int32
	go func() {
		for fn := range fns {
			fn()
		}
	}()
	defer close(fns)
	runner := func(_ int, fn func()) bool {
		batches.Add(1)
		fns <- fn
		return true
	}
	var owner engine.OwnerID
	propose := func(what string, n int) []int {
		t.Helper()
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			// A key and an owner per command: each is granted.
			owner++
			cmd := Command{Op: OpAcquire, Key: fmt.Appendf(nil, "%s-%d", what, i), Owner: owner, Client: owner, Limit: 1, TTL: time.Minute}
			err := l.ProposeFunc(cmd, nil, func(r Reply, err error) {
				defer wg.Done()
				if err != nil || r.Err != nil {
					t.Errorf("%s %d: %v, %v", what, i, err, r.Err)
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			})
			if err != nil {
				t.Fatalf("%s %d: ProposeFunc: %v", what, i, err)
			}
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not every command answered", what)
		}
		return order
	}

	l.SetAnswerRunner(runner)
	order := propose("run", 200)
	if batches.Load() == 0 {
		t.Fatal("the runner never got a batch")
	}
	for i := range order {
		if order[i] != i {
			t.Fatalf("answers out of log order: %v", order[:min(len(order), 20)])
		}
	}

	// Propose's answers (the REST API's) never go to the runner: with a
	// runner that keeps every batch and runs none, Propose still returns.
	var kept []func()
	var keptMu sync.Mutex
	l.SetAnswerRunner(func(_ int, fn func()) bool {
		keptMu.Lock()
		kept = append(kept, fn)
		keptMu.Unlock()
		return true
	})
	owner++
	if _, err := l.Propose(ctxT(t, 10*time.Second), Command{Op: OpAcquire, Key: []byte("propose"), Owner: owner, Client: owner, Limit: 1, TTL: time.Minute}, nil); err != nil {
		t.Fatalf("Propose with a runner that runs nothing: %v", err)
	}
	keptMu.Lock()
	if len(kept) != 0 {
		t.Fatalf("Propose's answer went to the runner (%d batches)", len(kept))
	}
	keptMu.Unlock()

	var refused atomic.Int32
	l.SetAnswerRunner(func(int, func()) bool { refused.Add(1); return false })
	propose("refused", 50)
	if refused.Load() == 0 {
		t.Fatal("the refusing runner was never asked")
	}

	l.SetAnswerRunner(nil)
	before := batches.Load() + refused.Load()
	propose("nil", 50)
	if after := batches.Load() + refused.Load(); after != before {
		t.Fatalf("a runner was asked after SetAnswerRunner(nil): %d -> %d", before, after)
	}
}
