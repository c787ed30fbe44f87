//go:build hashicorpraft

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
