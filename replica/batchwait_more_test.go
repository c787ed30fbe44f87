package replica

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
)

// holdOne has the leader l answer x and y in one entry and x's callback
// propose x2, which then waits for y (never back) in a batch wait of
// BatchWait; it returns once x2 is held, with the channel of x2's
// answers (buffered: a second answer shows up there too).
func holdOne(t *testing.T, l *Node) chan error {
	t.Helper()
	x2 := make(chan error, 2)
	l.mu.Lock()
	err1 := l.ProposeFunc(Command{Op: OpAcquire, Key: []byte("x"), Owner: 1, Client: 1, Limit: 1, TTL: time.Minute}, nil, func(r Reply, err error) {
		if err != nil {
			x2 <- err
			return
		}
		if err := l.ProposeFunc(Command{Op: OpAcquire, Key: []byte("x2"), Owner: 1, Limit: 1, TTL: time.Minute}, nil,
			func(r Reply, err error) { x2 <- err }); err != nil {
			x2 <- err
		}
	})
	err2 := l.ProposeFunc(Command{Op: OpAcquire, Key: []byte("y"), Owner: 2, Client: 2, Limit: 1, TTL: time.Minute}, nil, func(Reply, error) {})
	l.mu.Unlock()
	if err1 != nil || err2 != nil {
		t.Fatalf("ProposeFunc: %v, %v", err1, err2)
	}
	poll(t, 5*time.Second, "x2 held by a batch wait", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if !l.hold.on || l.propQ.len() != 1 {
			return false
		}
		// Held until the test ends it: a slow test must not see the
		// wait end at its deadline and x2 proposed.
		l.hold.until = time.Now().Add(time.Hour)
		return true
	})
	return x2
}

// answeredOnce waits for the one answer of x2 and checks no second one
// follows.
func answeredOnce(t *testing.T, x2 chan error, within time.Duration) error {
	t.Helper()
	var err error
	select {
	case err = <-x2:
	case <-time.After(within):
		t.Fatalf("x2, held by a batch wait, not answered in %v", within)
	}
	select {
	case e := <-x2:
		t.Fatalf("x2 answered twice: %v, then %v", err, e)
	case <-time.After(50 * time.Millisecond):
	}
	return err
}

// TestBatchWaitShutdownAnswersHeld: Shutdown while a batch wait holds a
// command answers it ErrClosed, once, without waiting for the deadline
// (holdOne makes it far longer than the test allows).
func TestBatchWaitShutdownAnswersHeld(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.BatchWait = 100 * time.Millisecond })
	l := c.leader(t)
	x2 := holdOne(t, l)
	c.kill(t, c.index(l))
	if err := answeredOnce(t, x2, 5*time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("x2 held at Shutdown: %v; want ErrClosed", err)
	}
}

// TestBatchWaitLeadershipLostAnswersHeld: a leader that hands off while a
// batch wait holds a command answers it (not leader) once, and the old
// leader, now a follower, runs no wait: its hold ended with the
// leadership, and applying the new leader's entries answers no one here.
func TestBatchWaitLeadershipLostAnswersHeld(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.BatchWait = 100 * time.Millisecond })
	l := c.leader(t)
	x2 := holdOne(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.TransferLeadership(ctx, ""); err != nil {
		t.Fatal(err)
	}
	err := answeredOnce(t, x2, 5*time.Second)
	var nl *NotLeaderError
	if !errors.As(err, &nl) && !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("x2 held when leadership moved: %v; want not leader (or unknown outcome)", err)
	}
	waits := l.holds.Load()
	// The new leader commits entries the old one applies as a follower.
	var others []*Node
	for _, n := range c.nodes {
		if n != l {
			others = append(others, n)
		}
	}
	nlNode := c.leaderAmong(t, others)
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := nlNode.Propose(ctx, Command{Op: OpAcquire, Key: []byte("after"), Owner: 3, Limit: 10, TTL: time.Minute}, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	applied := nlNode.Status().AppliedIndex
	poll(t, 5*time.Second, "the old leader applying the new leader's entries", func() bool { return l.Status().AppliedIndex >= applied })
	l.mu.Lock()
	on := l.hold.on
	l.mu.Unlock()
	if on || l.holds.Load() != waits {
		t.Fatalf("follower: hold on=%v, %d waits started since it lost the lead; want none", on, l.holds.Load()-waits)
	}
}

// TestBatchWaitNotOnFollower: a node that lost the lead between applying
// its last entry and starting the wait (the apply thread and the raft
// loop race for mu) starts none: leadershipLost has run, and no later
// one would end it. Before, the follower held a wait until its deadline
// (counted, and learnt from as a timeout).
func TestBatchWaitNotOnFollower(t *testing.T) {
	n := &Node{cfg: Config{BatchWait: time.Hour}, stop: make(chan struct{})}
	n.propQ.wake = make(chan struct{}, 1)
	n.role.Store(uint32(raft.StateFollower))
	n.startHold([]answered{{1, OpAcquire}, {2, OpAcquire}, {3, OpRelease}})
	if n.hold.timer != nil {
		t.Cleanup(func() { n.hold.timer.Stop() })
	}
	if n.hold.on || n.holds.Load() != 0 {
		t.Fatalf("follower: wait on=%v, %d waits; want none", n.hold.on, n.holds.Load())
	}
}
