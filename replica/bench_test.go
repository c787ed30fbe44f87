package replica

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// benchLeader starts a 3-node cluster and returns its
// ready leader.
func benchLeader(b *testing.B) *Node {
	c := newCluster(b, 3, nil)
	l := c.findLeader(c.live())
	for deadline := time.Now().Add(5 * time.Second); (l == nil || !l.IsLeader()) && time.Now().Before(deadline); l = c.findLeader(c.live()) {
		time.Sleep(5 * time.Millisecond) // a benchmark has no poll helper
	}
	if l == nil || !l.IsLeader() {
		b.Fatal("no leader")
	}
	return l
}

// benchPairs runs acquire+release pairs through the leader l from many
// goroutines at once, each with its own owner and key, so that batching
// (group commit) has work to share, and reports entries/s. newPair is
// called once per goroutine; the pair it returns reports success.
func benchPairs(b *testing.B, newPair func() func(owner engine.OwnerID, key []byte) bool) {
	b.ReportAllocs()
	var id atomic.Uint64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		owner := engine.OwnerID(id.Add(1))
		key := []byte(fmt.Sprint("bench-", owner))
		pair := newPair()
		for pb.Next() {
			if !pair(owner, key) {
				return
			}
		}
	})
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkProposeParallel measures acquire+release pairs (two log entries
// each) through the leader of a 3-node in-memory cluster.
func BenchmarkProposeParallel(b *testing.B) {
	l := benchLeader(b)
	ctx := context.Background()
	benchPairs(b, func() func(engine.OwnerID, []byte) bool {
		return func(owner engine.OwnerID, key []byte) bool {
			out, err := l.Acquire(ctx, engine.AcquireReq{Key: key, Owner: owner, Limit: 1}, nil)
			if err != nil || out.Result != engine.Granted {
				b.Errorf("Acquire = %v, %v", out.Result, err)
				return false
			}
			if err := l.Release(ctx, key, out.Token); err != nil {
				b.Errorf("Release: %v", err)
				return false
			}
			return true
		}
	})
}

// BenchmarkProposeFuncParallel is BenchmarkProposeParallel through
// ProposeFunc, the server's path: the answer comes to a callback, with no
// goroutine waiting per proposal.
func BenchmarkProposeFuncParallel(b *testing.B) {
	l := benchLeader(b)
	type res struct {
		r   Reply
		err error
	}
	benchPairs(b, func() func(engine.OwnerID, []byte) bool {
		ch := make(chan res, 1)
		done := func(r Reply, err error) { ch <- res{r, err} }
		return func(owner engine.OwnerID, key []byte) bool {
			if err := l.ProposeFunc(Command{Op: OpAcquire, Key: key, Owner: owner, Limit: 1}, nil, done); err != nil {
				b.Errorf("ProposeFunc(acquire): %v", err)
				return false
			}
			a := <-ch
			if a.err != nil || a.r.Outcome.Result != engine.Granted {
				b.Errorf("acquire = %v, %v", a.r.Outcome.Result, a.err)
				return false
			}
			if err := l.ProposeFunc(Command{Op: OpRelease, Key: key, Token: a.r.Outcome.Token}, nil, done); err != nil {
				b.Errorf("ProposeFunc(release): %v", err)
				return false
			}
			if a = <-ch; a.err != nil {
				b.Errorf("release: %v", a.err)
				return false
			}
			return true
		}
	})
}
