package replica

import (
	"errors"
	"testing"
	"time"
)

// TestHandOff: a leader's HandOff leaves another voter leading; on a
// follower it does nothing.
func TestHandOff(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	var f *Node
	for _, n := range c.nodes {
		if n != l {
			f = n
		}
	}
	f.HandOff(2 * time.Second)
	if !l.IsLeader() {
		t.Fatal("a follower's HandOff moved leadership")
	}
	l.HandOff(5 * time.Second)
	if raftLeads(l) {
		t.Fatal("the leader still leads after HandOff")
	}
	var others []*Node
	for _, n := range c.nodes {
		if n != l {
			others = append(others, n)
		}
	}
	nl := c.leaderAmong(t, others)
	poll(t, 5*time.Second, "the old leader to know the new one", func() bool { return l.Ready() == nil && l.Leader().LeaderID == nl.ID() })
}

// TestReady: a node is ready once it knows a leader and has applied what
// it knows committed; never after Shutdown.
func TestReady(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader(t)
	for _, n := range c.nodes {
		poll(t, 5*time.Second, n.ID()+" ready", func() bool { return n.Ready() == nil })
	}
	c.kill(t, 0)
	c.kill(t, 1)
	n := c.nodes[2]
	// Alone, the last node loses its leader (or, if it led, its quorum).
	poll(t, 10*time.Second, "the lone node not ready", func() bool { return n.Ready() != nil })
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ready after Shutdown = %v; want ErrClosed", err)
	}
}
