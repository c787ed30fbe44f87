package replica

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// TestBatchWaitStressHandOffs: clients that come straight back and
// clients that think for about the wait, on whichever node leads, while
// leadership moves: every proposal is answered exactly once, none waits
// without end (all are answered within 10 s of the end; the longest
// answer is reported).
func TestBatchWaitStressHandOffs(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.BatchWait = 2 * time.Millisecond })
	c.leader(t)
	var (
		mu       sync.Mutex
		pending  = make(map[int64]time.Time)
		twice    atomic.Int64
		answered atomic.Int64
		longest  atomic.Int64
		seq      atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	leaderNow := func() *Node {
		for _, n := range c.nodes {
			if n != nil && n.IsLeader() {
				return n
			}
		}
		return nil
	}
	const clients = 12
	for i := range clients {
		wg.Add(1)
		think := time.Duration(0)
		if i%2 == 1 {
			think = time.Duration(1+i%4) * time.Millisecond
		}
		var next func()
		next = func() {
			if stop.Load() {
				wg.Done()
				return
			}
			l := leaderNow()
			if l == nil {
				time.AfterFunc(5*time.Millisecond, next)
				return
			}
			id := seq.Add(1)
			mu.Lock()
			pending[id] = time.Now()
			mu.Unlock()
			key := []byte(fmt.Sprint("s-", i))
			err := l.ProposeFunc(Command{Op: OpAcquire, Key: key, Owner: 1, Client: engine.OwnerID(i + 1), Limit: 1 << 20, TTL: time.Minute}, nil,
				func(Reply, error) {
					mu.Lock()
					at, ok := pending[id]
					delete(pending, id)
					if d := int64(time.Since(at)); ok && d > longest.Load() {
						longest.Store(d)
					}
					mu.Unlock()
					if !ok {
						twice.Add(1)
						return
					}
					answered.Add(1)
					if d := think + time.Duration(rand.IntN(2))*think; d > 0 {
						time.AfterFunc(d, next)
					} else {
						go next() // not inside the node's callback: a fresh stack
					}
				})
			if err != nil {
				mu.Lock()
				delete(pending, id)
				mu.Unlock()
				time.AfterFunc(5*time.Millisecond, next)
			}
		}
		go next()
	}
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		l := leaderNow()
		if l == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := l.TransferLeadership(ctx, ""); err != nil {
			t.Logf("transfer: %v", err)
		}
		cancel()
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		mu.Lock()
		n := len(pending)
		mu.Unlock()
		t.Fatalf("clients still waiting 10s after the end: %d proposals unanswered", n)
	}
	st := c.leader(t).Status()
	t.Logf("%d answered, longest %v; leader's last view: %d waits, %d timed out",
		answered.Load(), time.Duration(longest.Load()), st.BatchWaits, st.BatchWaitTimeouts)
	if twice.Load() != 0 {
		t.Fatalf("%d answers to proposals already answered", twice.Load())
	}
}
