package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testport"
)

// diskCluster is n nodes on disk, talking over loopback TCP.
type diskCluster struct {
	t     testing.TB
	cfgs  []Config
	nodes []*Node
}

// freeAddr is a free loopback address no other test process is handed
// (internal/testport).
func freeAddr(t testing.TB) string { return testport.Free(t) }

func newDiskCluster(t testing.TB, n int, edit func(*Config)) *diskCluster {
	c := &diskCluster{t: t}
	var peers []Peer
	for i := range n {
		cfg := testConfig(fmt.Sprint("n", i+1))
		cfg.BindAddr = freeAddr(t)
		cfg.RaftDir = filepath.Join(t.TempDir(), cfg.NodeID)
		cfg.Bootstrap = true
		cfg.AuthToken = "0123456789abcdef-test"
		if edit != nil {
			edit(&cfg)
		}
		peers = append(peers, Peer{ID: cfg.NodeID, RaftAddr: cfg.BindAddr})
		c.cfgs = append(c.cfgs, cfg)
	}
	c.nodes = make([]*Node, n)
	for i := range c.cfgs {
		c.cfgs[i].Peers = peers
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	return c
}

func (c *diskCluster) start(i int) {
	c.t.Helper()
	var st Storage
	var err error
	for range 100 { // the port may linger a moment after a stop
		if st, err = DiskStorage(c.cfgs[i], zap.NewNop()); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	n, err := New(c.cfgs[i], zap.NewNop(), st)
	if err != nil {
		_ = st.Close()
		c.t.Fatal(err)
	}
	c.nodes[i] = n
}

func (c *diskCluster) stop(i int) {
	if c.nodes[i] != nil {
		_ = c.nodes[i].Shutdown()
		c.nodes[i] = nil
	}
}

// leader waits for a ready leader among the running nodes, other than skip.
func (c *diskCluster) leader(t testing.TB, skip int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range c.nodes {
			if n != nil && i != skip && n.IsLeader() {
				return i
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no leader")
	return -1
}

func (c *diskCluster) same(t testing.TB, idx ...int) {
	t.Helper()
	var a, b bytes.Buffer
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		var first []byte
		for _, i := range idx {
			a.Reset()
			if _, err := c.nodes[i].WriteState(&a); err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = bytes.Clone(a.Bytes())
			} else if !bytes.Equal(first, a.Bytes()) {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, i := range idx {
				t.Logf("%d: %+v", i, c.nodes[i].Status())
			}
			t.Fatal("replicas differ")
		}
		b.Reset()
		time.Sleep(10 * time.Millisecond)
	}
}

func acq(t testing.TB, n *Node, key string, owner engine.OwnerID) (engine.Outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.Acquire(ctx, engine.AcquireReq{Key: []byte(key), Owner: owner, Limit: 1, TTL: 30 * time.Second}, nil)
}

func BenchmarkEtcdAcquireRelease(b *testing.B) {
	c := newDiskCluster(b, 3, nil)
	l := c.nodes[c.leader(b, -1)]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o, err := acq(b, l, "k", 1)
		if err != nil || o.Result != engine.Granted {
			b.Fatal(o, err)
		}
		if err := l.Release(context.Background(), []byte("k"), o.Token); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEtcdParallel(b *testing.B) {
	c := newDiskCluster(b, 3, nil)
	l := c.nodes[c.leader(b, -1)]
	var owner atomic.Uint64
	b.SetParallelism(50)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		o := engine.OwnerID(owner.Add(1))
		key := fmt.Sprint("k", o)
		for pb.Next() {
			out, err := acq(b, l, key, o)
			if err != nil || out.Result != engine.Granted {
				b.Error(out, err)
				return
			}
			if err := l.Release(context.Background(), []byte(key), out.Token); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func ctx5() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

func TestEtcdReplicatesAndRedirects(t *testing.T) {
	c := newDiskCluster(t, 3, nil)
	li := c.leader(t, -1)
	l, f := c.nodes[li], c.nodes[(li+1)%3]
	o, err := acq(t, l, "job", 7)
	if err != nil || o.Result != engine.Granted {
		t.Fatal(o, err)
	}
	// The leader's client address reaches a follower with the leader's
	// restamp entry: wait until every replica has applied the grant.
	c.same(t, 0, 1, 2)
	_, err = acq(t, f, "job", 8)
	var nl *NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderID != l.ID() || nl.ClientAddr != l.cfg.ClientAddr {
		t.Fatalf("follower: %v", err)
	}
	st := f.Status()
	if st.Role != "follower" || st.LeaderID != l.ID() || len(st.Voters) != 3 {
		t.Fatalf("follower status %+v", st)
	}
}

// A leader cut off from the others steps down (CheckQuorum) and never
// grants; the majority elects a leader that does.
func TestEtcdMinorityNeverGrants(t *testing.T) {
	c := newDiskCluster(t, 3, nil)
	li := c.leader(t, -1)
	old := c.nodes[li]
	o1, err := acq(t, old, "job", 1)
	if err != nil || o1.Result != engine.Granted {
		t.Fatal(o1, err)
	}
	if err := old.Release(context.Background(), []byte("job"), o1.Token); err != nil {
		t.Fatal(err)
	}
	all := func(uint64) bool { return true }
	old.tr.cut.Store(&all)
	for i, n := range c.nodes {
		if i != li {
			self := old.id
			cut := func(p uint64) bool { return p == self }
			n.tr.cut.Store(&cut)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	o, err := old.Acquire(ctx, engine.AcquireReq{Key: []byte("job"), Owner: 2, Limit: 1, TTL: time.Minute}, nil)
	if err == nil || o.Result == engine.Granted {
		t.Fatalf("the cut-off leader granted: %+v %v", o, err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for old.isLeaderState() {
		if time.Now().After(deadline) {
			t.Fatal("the cut-off leader did not step down")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ni := c.leader(t, li)
	o3, err := acq(t, c.nodes[ni], "job", 3)
	if err != nil || o3.Result != engine.Granted || o3.Token.Fence <= o1.Token.Fence {
		t.Fatalf("new leader: %+v %v", o3, err)
	}
	for _, n := range c.nodes {
		n.tr.cut.Store(nil)
	}
	c.same(t, 0, 1, 2)
	for _, l := range c.nodes[li].FSM().Engine().Snapshot(0).Locks {
		if l.Key == "job" && l.OwnerConnID != 3 {
			t.Fatalf("job held by %d", l.OwnerConnID)
		}
	}
}

func TestEtcdRestartKeepsState(t *testing.T) {
	c := newDiskCluster(t, 3, nil)
	l := c.nodes[c.leader(t, -1)]
	o1, err := acq(t, l, "a", 1)
	if err != nil || o1.Result != engine.Granted {
		t.Fatal(o1, err)
	}
	c.same(t, 0, 1, 2)
	for i := range c.nodes {
		c.stop(i)
	}
	for i := range c.nodes {
		c.start(i)
	}
	l = c.nodes[c.leader(t, -1)]
	o2, err := acq(t, l, "a", 2)
	if err != nil || o2.Result != engine.TimedOut {
		t.Fatalf("a is still held: got %+v %v", o2, err)
	}
	o3, err := acq(t, l, "b", 2)
	if err != nil || o3.Result != engine.Granted || o3.Token.Fence <= o1.Token.Fence {
		t.Fatalf("b: %+v %v (first fence %d)", o3, err, o1.Token.Fence)
	}
	c.same(t, 0, 1, 2)
}

func TestEtcdSnapshotCatchUp(t *testing.T) {
	c := newDiskCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 40
		cfg.TrailingLogs = 5
	})
	li := c.leader(t, -1)
	fi := (li + 1) % 3
	c.stop(fi)
	l := c.nodes[li]
	for i := range 150 {
		o, err := acq(t, l, fmt.Sprint("k", i%7), engine.OwnerID(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if o.Result == engine.Granted {
			if err := l.Release(context.Background(), []byte(fmt.Sprint("k", i%7)), o.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
	if first, _ := l.mem.FirstIndex(); first < 50 {
		t.Fatalf("leader did not compact: first index %d", first)
	}
	c.start(fi)
	c.same(t, 0, 1, 2)
	if c.nodes[fi].FSM().Restores() == 0 {
		t.Fatal("the follower caught up without a snapshot")
	}
	// And it restarts from its own snapshot and log.
	c.stop(fi)
	c.start(fi)
	c.same(t, 0, 1, 2)
}

func TestEtcdMembership(t *testing.T) {
	c := newDiskCluster(t, 3, nil)
	l := c.nodes[c.leader(t, -1)]
	// n4 starts empty, without peers: it learns the cluster from the
	// leader's snapshot once added.
	cfg := testConfig("n4")
	cfg.BindAddr = freeAddr(t)
	cfg.RaftDir = filepath.Join(t.TempDir(), "n4")
	cfg.AuthToken = c.cfgs[0].AuthToken
	c.cfgs = append(c.cfgs, cfg)
	c.nodes = append(c.nodes, nil)
	c.start(3)
	ctx, cancel := ctx5()
	defer cancel()
	if err := l.AddLearner(ctx, "n4", cfg.BindAddr); err != nil {
		t.Fatal(err)
	}
	if o, err := acq(t, l, "x", 1); err != nil || o.Result != engine.Granted {
		t.Fatal(o, err)
	}
	c.same(t, 0, 1, 2, 3)
	if err := l.AddVoter(ctx, "n4", cfg.BindAddr); err != nil {
		t.Fatal(err)
	}
	voters := 0
	for _, m := range l.Status().Voters {
		if m.Suffrage == "voter" {
			voters++
		}
	}
	if voters != 4 {
		t.Fatalf("voters: %+v", l.Status().Voters)
	}
	// Hand leadership to n4 (once it knows it votes), then remove the
	// old leader.
	c.same(t, 0, 1, 2, 3)
	if err := l.TransferLeadership(ctx, "n4"); err != nil {
		t.Fatal(err)
	}
	n4 := c.nodes[3]
	deadline := time.Now().Add(5 * time.Second)
	for !n4.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("n4 did not take over")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := n4.RemoveServer(ctx, l.ID()); err != nil {
		t.Fatal(err)
	}
	if o, err := acq(t, n4, "y", 2); err != nil || o.Result != engine.Granted {
		t.Fatal(o, err)
	}
	if len(n4.Status().Voters) != 3 {
		t.Fatalf("after remove: %+v", n4.Status().Voters)
	}
	var rest []int
	for i := range c.nodes {
		if c.nodes[i] != l {
			rest = append(rest, i)
		}
	}
	c.same(t, rest...)
}

// TestEtcdRaftLogLevels: etcd raft's lines reach zap at their own levels,
// filtered by RaftLogLevel; a node logs the leader it learns and its role.
func TestEtcdRaftLogLevels(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	cfg := testConfig("n0")
	cfg.RaftLogLevel = "warn"
	l := raftLog(cfg, zap.New(core))
	l.Debugf("x %d", 1)
	l.Infof("becomes follower at term %d", 2)
	l.Warningf("dropping %s", "msg")
	l.Errorf("bad %s", "thing")
	got := logs.AllUntimed()
	if len(got) != 2 || got[0].Level != zapcore.WarnLevel || got[0].Message != "dropping msg" || got[1].Level != zapcore.ErrorLevel {
		t.Fatalf("zap saw %v; want raft's warning and error only", got)
	}
	cfg.RaftLogLevel = "off"
	raftLog(cfg, zap.New(core)).Errorf("hidden")
	if logs.Len() != 2 {
		t.Fatal("RaftLogLevel off let a line through")
	}

	core, logs = observer.New(zapcore.InfoLevel)
	cfg = testConfig("solo")
	cfg.BindAddr = freeAddr(t)
	cfg.RaftDir = t.TempDir()
	cfg.Bootstrap = true
	cfg.Peers = []Peer{{ID: "solo", RaftAddr: cfg.BindAddr}}
	st, err := DiskStorage(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, zap.New(core), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	poll(t, 5*time.Second, "a leader log line", func() bool {
		return logs.FilterMessage("raft leader").FilterField(zap.String("leader_id", "solo")).Len() > 0 &&
			logs.FilterMessage("raft role").FilterField(zap.String("role", "leader")).Len() > 0
	})
}

// TestEtcdAuthTransport: two nodes with the same token form a cluster and
// replicate; a raw client with a wrong token is refused while the cluster
// keeps committing; a node with a wrong token, added as a voter, gets no
// raft traffic through (its log and term stay empty) and is removed again.
func TestEtcdAuthTransport(t *testing.T) {
	var nodes []*Node
	var logs []*observer.ObservedLogs
	var peers []Peer
	var cfgs []Config
	for i := range 2 {
		cfg := testConfig(fmt.Sprint("a", i))
		cfg.RaftDir = t.TempDir()
		cfg.BindAddr = freeAddr(t)
		cfg.AuthToken = testToken
		cfg.Bootstrap = true
		cfgs = append(cfgs, cfg)
		peers = append(peers, Peer{ID: cfg.NodeID, RaftAddr: cfg.BindAddr})
	}
	for _, cfg := range cfgs {
		cfg.Peers = peers
		core, ol := observer.New(zapcore.DebugLevel)
		st, err := DiskStorage(cfg, zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		nd, err := New(cfg, zap.New(core), st)
		if err != nil {
			_ = st.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nd.Shutdown() })
		nodes, logs = append(nodes, nd), append(logs, ol)
	}
	c := &cluster{t: t}
	l := c.leaderAmong(t, nodes)
	li := 0
	if nodes[1] == l {
		li = 1
	}
	ctx := ctxT(t, 20*time.Second)
	grants := 0
	acquire := func() {
		t.Helper()
		grants++
		out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte(fmt.Sprint("k", grants)), Owner: 1, Limit: 1, TTL: time.Minute}, nil)
		if err != nil || out.Result != engine.Granted {
			t.Fatalf("Acquire = %v, %v; want granted", out.Result, err)
		}
		waitSame(t, nodes...)
	}
	acquire()

	for range 3 {
		raw, err := net.DialTimeout("tcp", cfgs[li].BindAddr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
		if err := dialHandshake(raw, []byte(wrongToken)); err == nil {
			t.Fatal("the leader accepted a wrong token")
		}
		_ = raw.Close()
	}
	poll(t, 5*time.Second, "three refusals logged", func() bool {
		_, all := refusals(logs[li])
		return all >= 3
	})
	if warn, _ := refusals(logs[li]); warn != 1 {
		t.Fatalf("%d warnings for one refused host; want 1", warn)
	}
	acquire()

	cfg := testConfig("x")
	cfg.RaftDir = t.TempDir()
	cfg.BindAddr = freeAddr(t)
	cfg.AuthToken = wrongToken
	core, xlogs := observer.New(zapcore.DebugLevel)
	st, err := DiskStorage(cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	x, err := New(cfg, zap.New(core), st)
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	defer x.Shutdown()
	// Two of three voters commit the change without x.
	if err := l.AddVoter(ctx, "x", cfg.BindAddr); err != nil {
		t.Fatalf("AddVoter(x): %v", err)
	}
	poll(t, 10*time.Second, "x refusing the leader's connections", func() bool {
		_, all := refusals(xlogs)
		return all >= 3
	})
	acquire() // the cluster still commits
	if s := x.Status(); s.LastLogIndex != 0 || s.Term != 0 || s.LeaderID != "" || s.AppliedIndex != 0 {
		t.Fatalf("x got raft traffic through: %+v", s)
	}
	if warn, _ := refusals(xlogs); warn != 1 {
		t.Fatalf("x logged %d warnings; want 1", warn)
	}
	if err := l.RemoveServer(ctx, "x"); err != nil {
		t.Fatalf("RemoveServer(x): %v", err)
	}
	for _, n := range nodes {
		poll(t, 5*time.Second, "a configuration without x", func() bool {
			vs := n.Status().Voters
			return len(vs) == 2 && vs[0].ID != "x" && vs[1].ID != "x"
		})
	}
	acquire()
}
