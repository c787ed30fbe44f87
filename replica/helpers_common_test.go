package replica

import (
	"context"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// testConfig is a node Config with timings short enough that an in-memory
// election takes well under a second, even under -race on a busy machine.
func testConfig(id string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.ClientAddr = "client-" + id
	cfg.HTTPAddr = "http-" + id
	cfg.HeartbeatTimeout = 100 * time.Millisecond
	cfg.ElectionTimeout = 100 * time.Millisecond
	cfg.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.CommitTimeout = 2 * time.Millisecond
	cfg.SnapshotInterval = time.Hour // tests snapshot on demand
	cfg.SnapshotThreshold = 1 << 20
	cfg.ExpireEvery = 5 * time.Millisecond
	cfg.ApplyTimeout = 2 * time.Second
	cfg.RaftLogLevel = "off"
	cfg.Engine.Shards = 8
	return cfg
}

// poll calls cond until it reports true, failing the test after d. A
// ticker paces it: no bare sleeps.
func poll(t *testing.T, d time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			for _, f := range detail {
				msg += "; " + f()
			}
			t.Fatalf("no %s after %v%s", what, d, msg)
		}
		<-tick.C
	}
}

// chanSink is a Sink that hands the Outcome to a channel.
type chanSink chan engine.Outcome

func newChanSink() chanSink { return make(chanSink, 1) }

// Deliver implements engine.Sink; a second delivery would block the FSM,
// so it panics instead.
func (s chanSink) Deliver(o engine.Outcome) {
	select {
	case s <- o:
	default:
		panic("chanSink delivered twice")
	}
}

func (s chanSink) wait(t *testing.T, d time.Duration) engine.Outcome {
	t.Helper()
	select {
	case o := <-s:
		return o
	case <-time.After(d):
		t.Fatalf("sink heard nothing in %v", d)
	}
	return engine.Outcome{}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lockHolder returns the owner holding the lock key in n's engine at now,
// and false if nobody holds it.
func lockHolder(n *Node, key string, now int64) (engine.LockStat, bool) {
	for _, l := range n.FSM().Engine().Snapshot(now).Locks {
		if l.Key == key {
			return l, true
		}
	}
	return engine.LockStat{}, false
}
