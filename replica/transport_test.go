//go:build !etcdraft

package replica

import (
	"errors"
	"fmt"
	"io"
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

const (
	testToken  = "correct horse battery staple"
	wrongToken = "incorrect horse battery staple"
)

// refusals returns the refusal log entries in logs: the warn ones and all.
func refusals(logs *observer.ObservedLogs) (warn, all int) {
	for _, e := range logs.FilterMessageSnippet("refused a connection").All() {
		all++
		if e.Level == zapcore.WarnLevel {
			warn++
		}
	}
	return warn, all
}

// readsEOF reports whether c is closed by its peer within d, having
// received nothing.
func readsEOF(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	if err != nil || len(b) != 0 {
		t.Fatalf("read %q, %v; want nothing, then EOF", b, err)
	}
}

func TestAuthHandshakePipe(t *testing.T) {
	run := func(dkey, akey string, hello []byte) (derr, aerr error) {
		d, a := net.Pipe()
		defer d.Close()
		done := make(chan error, 1)
		go func() {
			err := acceptHandshake(a, []byte(akey))
			_ = a.Close() // as serve does on failure; harmless on success
			done <- err
		}()
		_ = d.SetDeadline(time.Now().Add(5 * time.Second))
		if hello != nil {
			_, derr = d.Write(hello)
		} else {
			derr = dialHandshake(d, []byte(dkey))
		}
		return derr, <-done
	}
	if derr, aerr := run(testToken, testToken, nil); derr != nil || aerr != nil {
		t.Fatalf("same token: dialer %v, acceptor %v; want both nil", derr, aerr)
	}
	if derr, aerr := run(wrongToken, testToken, nil); derr == nil || !errors.Is(aerr, errAuthProof) {
		t.Fatalf("wrong dialer token: dialer %v, acceptor %v; want an error, errAuthProof", derr, aerr)
	}
	junk := []byte(strings.Repeat("GET / HTTP/1.1\r\n", 4))
	if _, aerr := run("", testToken, junk); !errors.Is(aerr, errAuthHello) {
		t.Fatalf("junk: acceptor %v; want errAuthHello", aerr)
	}

	// A dialer that holds the token but an acceptor that does not: the
	// dialer refuses the acceptor's proof.
	d, a := net.Pipe()
	defer d.Close()
	go func() {
		// A fake acceptor: it accepts any proof and answers garbage.
		nd, _ := readHello(a)
		hello, na := authHello()
		_, _ = a.Write(hello)
		_, _ = io.ReadFull(a, make([]byte, authProofLen))
		_, _ = a.Write(authProof([]byte(wrongToken), authLabelAccept, nd, na))
		_ = a.Close()
	}()
	_ = d.SetDeadline(time.Now().Add(5 * time.Second))
	if err := dialHandshake(d, []byte(testToken)); !errors.Is(err, errAuthProof) {
		t.Fatalf("dialing an acceptor with another token: %v; want errAuthProof", err)
	}
}

// TestAuthStreamLayer runs the layer over TCP: good peers get through
// while a silent client, a junk client, a wrong token and a replayed proof
// are refused, each logged at warn once per host, and none of them holds
// up Accept.
func TestAuthStreamLayer(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	s, err := listenAuth("127.0.0.1:0", nil, testToken, 300*time.Millisecond, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	addr := s.Addr().String()
	peer, err := listenAuth("127.0.0.1:0", nil, testToken, 300*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Close() })
	wrong, err := listenAuth("127.0.0.1:0", nil, wrongToken, 300*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wrong.Close() })

	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()

	// A silent client holds a handshake slot, not the accept loop.
	silent, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	good, err := peer.Dial(raft.ServerAddress(addr), 2*time.Second)
	if err != nil {
		t.Fatalf("Dial with the same token: %v", err)
	}
	defer good.Close()
	var in net.Conn
	select {
	case in = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("Accept returned nothing for a good peer")
	}
	// The handshake left no deadline and no stray byte on either side.
	if _, err := good.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	_ = in.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(in, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v through the accepted conn; want ping", buf, err)
	}
	_ = in.Close()

	readsEOF(t, silent, 5*time.Second) // dropped at its deadline

	junk, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	if _, err := junk.Write([]byte(strings.Repeat("x", authHelloLen))); err != nil {
		t.Fatal(err)
	}
	readsEOF(t, junk, 5*time.Second)

	if c, err := wrong.Dial(raft.ServerAddress(addr), 2*time.Second); err == nil {
		_ = c.Close()
		t.Fatal("Dial with a wrong token succeeded")
	}

	// Replay: a recorded proof fails on a new connection, whose acceptor
	// nonce is fresh.
	key := []byte(testToken)
	raw, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	hello, nd := authHello()
	_, _ = raw.Write(hello)
	na, err := readHello(raw)
	if err != nil {
		t.Fatal(err)
	}
	recorded := authProof(key, authLabelDialer, nd, na)
	_, _ = raw.Write(recorded)
	if _, err := io.ReadFull(raw, make([]byte, authProofLen)); err != nil {
		t.Fatalf("a correct manual handshake was refused: %v", err)
	}
	_ = raw.Close()
	select {
	case c := <-accepted:
		_ = c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("Accept returned nothing for the manual handshake")
	}
	replay, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Close()
	_ = replay.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = replay.Write(hello) // the same nonce
	if _, err := readHello(replay); err != nil {
		t.Fatal(err)
	}
	_, _ = replay.Write(recorded)
	readsEOF(t, replay, 5*time.Second)

	poll(t, 5*time.Second, "four refusals", func() bool { return s.refused.Load() >= 4 },
		func() string { return fmt.Sprint(s.refused.Load(), " refused") })
	if warn, all := refusals(logs); warn != 1 || all < 4 {
		t.Fatalf("%d warn and %d refusal log entries in all; want 1 warn (one host) and at least 4", warn, all)
	}
	select {
	case c := <-accepted:
		t.Fatalf("Accept returned a refused connection from %v", c.RemoteAddr())
	default:
	}

	// Close ends Accept with net.ErrClosed, and a handshake in progress.
	pending, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Close()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case _, ok := <-accepted:
		if ok {
			t.Fatal("Accept returned a connection after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still blocked after Close")
	}
	readsEOF(t, pending, 5*time.Second)
}

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
