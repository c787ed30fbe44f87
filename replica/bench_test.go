package replica

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// benchLeader starts a 3-node cluster (either raft build) and returns its
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

// BenchmarkProposeParallel measures acquire+release pairs (two log entries
// each) through the leader of a 3-node in-memory cluster, with many
// concurrent proposers so that batching (group commit) has work to share.
func BenchmarkProposeParallel(b *testing.B) {
	l := benchLeader(b)
	b.ReportAllocs()
	var id atomic.Uint64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		owner := engine.OwnerID(id.Add(1))
		key := []byte(fmt.Sprint("bench-", owner))
		ctx := context.Background()
		for pb.Next() {
			out, err := l.Acquire(ctx, engine.AcquireReq{Key: key, Owner: owner, Limit: 1}, nil)
			if err != nil || out.Result != engine.Granted {
				b.Errorf("Acquire = %v, %v", out.Result, err)
				return
			}
			if err := l.Release(ctx, key, out.Token); err != nil {
				b.Errorf("Release: %v", err)
				return
			}
		}
	})
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkProposeFuncParallel is BenchmarkProposeParallel through
// ProposeFunc, the server's path: the answer comes to a callback, with no
// goroutine waiting per proposal.
func BenchmarkProposeFuncParallel(b *testing.B) {
	l := benchLeader(b)
	b.ReportAllocs()
	var id atomic.Uint64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		owner := engine.OwnerID(id.Add(1))
		key := []byte(fmt.Sprint("bench-", owner))
		type res struct {
			r   Reply
			err error
		}
		ch := make(chan res, 1)
		done := func(r Reply, err error) { ch <- res{r, err} }
		for pb.Next() {
			if err := l.ProposeFunc(Command{Op: OpAcquire, Key: key, Owner: owner, Limit: 1}, nil, done); err != nil {
				b.Errorf("ProposeFunc(acquire): %v", err)
				return
			}
			a := <-ch
			if a.err != nil || a.r.Outcome.Result != engine.Granted {
				b.Errorf("acquire = %v, %v", a.r.Outcome.Result, a.err)
				return
			}
			if err := l.ProposeFunc(Command{Op: OpRelease, Key: key, Token: a.r.Outcome.Token}, nil, done); err != nil {
				b.Errorf("ProposeFunc(release): %v", err)
				return
			}
			if a = <-ch; a.err != nil {
				b.Errorf("release: %v", a.err)
				return
			}
		}
	})
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "entries/s")
}
