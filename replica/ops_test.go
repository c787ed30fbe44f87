//go:build !etcdraft

package replica

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
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
	if l.raft.State() == raft.Leader {
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

// TestRaftLogLevels: raft's lines reach zap at their own levels (before,
// every one was INFO, so --log-level warn hid raft's warnings), with its
// key/value pairs as fields; RaftLogLevel still filters.
func TestRaftLogLevels(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	cfg := testConfig("n0")
	cfg.RaftLogLevel = "debug"
	hl := raftLogger(cfg, zap.New(core)).Named("transport")
	hl.Debug("appendEntries", "peer", "n1")
	hl.Info("entering follower state", "leader", "")
	hl.Warn("heartbeat timeout reached, starting election", "last-leader-id", "n1")
	hl.Error("failed to contact quorum of nodes", "err", errors.New("timeout"))
	got := logs.AllUntimed()
	if len(got) != 2 || got[0].Level != zapcore.WarnLevel || got[1].Level != zapcore.ErrorLevel {
		t.Fatalf("zap at warn saw %v; want raft's warning and error only, at their levels", got)
	}
	f := got[0].ContextMap()
	if f["last-leader-id"] != "n1" || f["module"] != "raft.transport" || f["node_id"] != "n0" {
		t.Fatalf("warning fields = %v", f)
	}

	core, logs = observer.New(zapcore.DebugLevel)
	cfg.RaftLogLevel = "warn"
	hl = raftLogger(cfg, zap.New(core))
	hl.Info("not wanted")
	hl.Warn("wanted")
	if got := logs.AllUntimed(); len(got) != 1 || got[0].Message != "wanted" {
		t.Fatalf("RaftLogLevel warn let through %v", got)
	}
}

// TestLeaderLogLines: a node logs the leader it learns and its role
// changes.
func TestLeaderLogLines(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	addr, tr := raft.NewInmemTransport("")
	cfg := testConfig("solo")
	cfg.Bootstrap = true
	cfg.Peers = []Peer{{ID: "solo", RaftAddr: string(addr)}}
	n, err := New(cfg, zap.New(core), InmemStorage(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	poll(t, 5*time.Second, "a leader log line", func() bool {
		return logs.FilterMessage("raft leader").FilterField(zap.String("leader_id", "solo")).Len() > 0 &&
			logs.FilterMessage("raft role").FilterField(zap.String("role", "leader")).Len() > 0
	})
}
