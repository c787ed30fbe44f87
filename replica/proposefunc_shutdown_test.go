package replica

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestProposeFuncShutdownAnswersAll: every proposal ProposeFunc took is
// answered exactly once when the node shuts down under it, including
// those still queued behind the entry in flight (maxInflightEntries) and
// those submitted while Shutdown runs. A server counts its proposals in
// flight and waits for their answers when it stops.
func TestProposeFuncShutdownAnswersAll(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	i := c.index(l)
	// Nothing commits: the first entry stays in flight, the rest queue.
	c.isolate(i)

	var taken, answered, twice atomic.Int64
	var mu sync.Mutex
	seen := make(map[int]bool)
	propose := func(k int) {
		err := l.ProposeFunc(Command{Op: OpAcquire, Key: []byte("sd"), Owner: 1, Limit: 1000, TTL: time.Minute}, nil,
			func(Reply, error) {
				mu.Lock()
				if seen[k] {
					twice.Add(1)
				}
				seen[k] = true
				mu.Unlock()
				answered.Add(1)
			})
		if err == nil {
			taken.Add(1)
		}
	}
	for k := range 8 {
		propose(k)
	}
	if taken.Load() == 0 {
		t.Fatal("the leader took no proposal")
	}
	// More proposers while Shutdown runs.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var next atomic.Int64
	next.Store(1000)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				propose(int(next.Add(1)))
			}
		}()
	}
	c.kill(t, i)
	close(stop)
	wg.Wait()

	poll(t, 5*time.Second, "every proposal ProposeFunc took answered after Shutdown",
		func() bool { return answered.Load() >= taken.Load() },
		func() string { return fmt.Sprintf("%d of %d answered", answered.Load(), taken.Load()) })
	if n := twice.Load(); n != 0 {
		t.Fatalf("%d proposals answered twice", n)
	}
}
