//go:build hashicorpraft

package replica

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/latchd/latchd/engine"
)

// startAuthNodes starts n on-disk nodes over the authenticated transport,
// bootstrapped together, and returns them with each node's log.
func startAuthNodes(t *testing.T, token string, n int) ([]*Node, []*observer.ObservedLogs) {
	t.Helper()
	var (
		cfgs  []Config
		sts   []Storage
		logs  []*observer.ObservedLogs
		zaps  []*zap.Logger
		peers []Peer
	)
	for i := range n {
		cfg := testConfig(fmt.Sprint("a", i))
		cfg.RaftDir = t.TempDir()
		cfg.BindAddr = "127.0.0.1:0"
		cfg.AuthToken = token
		core, ol := observer.New(zapcore.DebugLevel)
		zl := zap.New(core)
		st, err := DiskStorage(cfg, zl)
		if err != nil {
			t.Fatalf("DiskStorage: %v", err)
		}
		cfgs, sts, logs, zaps = append(cfgs, cfg), append(sts, st), append(logs, ol), append(zaps, zl)
		peers = append(peers, Peer{ID: cfg.NodeID, RaftAddr: string(st.Transport.LocalAddr())})
	}
	var nodes []*Node
	for i, cfg := range cfgs {
		cfg.Bootstrap = true
		cfg.Peers = peers
		nd, err := New(cfg, zaps[i], sts[i])
		if err != nil {
			_ = sts[i].Close()
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { _ = nd.Shutdown() })
		nodes = append(nodes, nd)
	}
	return nodes, logs
}

// TestAuthTransportCluster: two nodes with the same token form a cluster
// over DiskStorage's TCP transport and replicate; a raw client with a
// wrong token is refused while the cluster keeps working; a node with a
// wrong token, added as a voter, never gets an AppendEntries through and
// can be removed again.
func TestAuthTransportCluster(t *testing.T) {
	nodes, logs := startAuthNodes(t, testToken, 2)
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

	t.Run("raw client with a wrong token", func(t *testing.T) {
		addr := string(l.Raft().Leader())
		for range 3 {
			raw, err := net.DialTimeout("tcp", addr, time.Second)
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
	})

	t.Run("node with a wrong token cannot join", func(t *testing.T) {
		cfg := testConfig("x")
		cfg.RaftDir = t.TempDir()
		cfg.BindAddr = "127.0.0.1:0"
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

		var failed, resumed atomic.Int64
		obs := make(chan raft.Observation, 64)
		o := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				return d.PeerID == "x"
			case raft.ResumedHeartbeatObservation:
				return d.PeerID == "x"
			}
			return false
		})
		l.Raft().RegisterObserver(o)
		defer l.Raft().DeregisterObserver(o)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case ob := <-obs:
					if _, ok := ob.Data.(raft.FailedHeartbeatObservation); ok {
						failed.Add(1)
					} else {
						resumed.Add(1)
					}
				}
			}
		}()

		// Two of three voters commit the change without x.
		if err := l.AddVoter(ctx, "x", string(st.Transport.LocalAddr())); err != nil {
			t.Fatalf("AddVoter(x): %v", err)
		}
		poll(t, 10*time.Second, "three failed heartbeats to x", func() bool { return failed.Load() >= 3 })
		acquire() // the cluster still commits
		if r := resumed.Load(); r != 0 {
			t.Fatalf("%d heartbeats to x resumed", r)
		}
		if s := x.Status(); s.LastLogIndex != 0 || s.Term != 0 || s.LeaderID != "" || s.AppliedIndex != 0 {
			t.Fatalf("x got raft traffic through: %+v", s)
		}
		if warn, all := refusals(xlogs); warn != 1 || all < 3 {
			t.Fatalf("x logged %d warn and %d refusals in all; want 1 warn and at least 3", warn, all)
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
	})
}

// TestAuthTokenConfig: a short token is refused; plain and authenticated
// transports do not talk to each other.
func TestAuthTokenConfig(t *testing.T) {
	cfg := testConfig("n0")
	cfg.AuthToken = "short"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "auth token") {
		t.Fatalf("Validate with a 5-byte token = %v; want an error", err)
	}
	cfg.AuthToken = testToken
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}

	cfg.BindAddr = "127.0.0.1:0"
	auth, err := newTransport(cfg, raftLogger(cfg, zap.NewNop()), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	cfg.AuthToken = ""
	plain, err := newTransport(cfg, raftLogger(cfg, zap.NewNop()), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var resp raft.AppendEntriesResponse
	req := raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n0"), Addr: []byte(auth.LocalAddr())}, Term: 1}
	if err := plain.AppendEntries("n1", auth.LocalAddr(), &req, &resp); err == nil {
		t.Fatal("a plain transport's AppendEntries reached an authenticated one")
	}
	if err := auth.AppendEntries("n1", plain.LocalAddr(), &req, &resp); err == nil {
		t.Fatal("an authenticated transport's AppendEntries reached a plain one")
	}
	select {
	case rpc := <-plain.Consumer():
		t.Fatalf("the plain transport delivered %T", rpc.Command)
	case rpc := <-auth.Consumer():
		t.Fatalf("the authenticated transport delivered %T", rpc.Command)
	default:
	}
}
