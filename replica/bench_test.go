//go:build hashicorpraft

package replica

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// BenchmarkProposeParallel measures acquire+release pairs (two log entries
// each) through the leader of a 3-node in-memory cluster, with many
// concurrent proposers so that batching (group commit) has work to share.
func BenchmarkProposeParallel(b *testing.B) {
	c := newCluster(b, 3, nil)
	l := c.findLeader(c.live())
	for deadline := time.Now().Add(5 * time.Second); l == nil && time.Now().Before(deadline); l = c.findLeader(c.live()) {
		time.Sleep(5 * time.Millisecond) // a benchmark has no poll helper
	}
	if l == nil {
		b.Fatal("no leader")
	}
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
