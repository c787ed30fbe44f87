package replica

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"
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

// TestTransportAuth runs the handshake in the transport over TCP: a good
// peer's messages get through while a silent client, a junk client, a
// wrong token and a replayed proof are refused, each logged at warn once
// per host, and none of them holds up the accept loop.
func TestTransportAuth(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	key := []byte(testToken)
	st := dialOnlyStorage(t)
	st.key = key
	s := newTransport(st, zap.New(core))
	s.handshakeWait = 300 * time.Millisecond
	got := make(chan *raftpb.Message, 4)
	s.recv = func(m *raftpb.Message) { got <- m }
	s.start()
	closeS := sync.OnceFunc(s.close)
	t.Cleanup(closeS)
	addr := st.ln.Addr().String()

	pst := dialOnlyStorage(t)
	pst.key = key
	peer := newTransport(pst, zap.NewNop())
	peer.self = 2
	peer.unreachable = func(uint64) {}
	defer peer.close()
	heartbeat := func() {
		t.Helper()
		peer.send(&raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), To: proto.Uint64(1), From: proto.Uint64(2)})
		select {
		case m := <-got:
			if m.GetFrom() != 2 {
				t.Fatalf("got a message from %d; want 2", m.GetFrom())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a peer with the same token got no message through")
		}
	}

	// A silent client holds a handshake slot, not the accept loop.
	silent, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	peer.setPeer(1, addr)
	heartbeat()
	peer.mu.Lock()
	p := peer.peers[1]
	peer.mu.Unlock()
	conn := p.live.Load()

	readsEOF(t, silent, 5*time.Second) // dropped at its deadline

	// The handshake left no deadline (its own has passed by now) and no
	// stray byte: the same connection still carries messages.
	heartbeat()
	if p.live.Load() != conn {
		t.Fatal("the peer's connection was dropped after the handshake")
	}

	junk, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	if _, err := junk.Write([]byte(strings.Repeat("x", authHelloLen))); err != nil {
		t.Fatal(err)
	}
	readsEOF(t, junk, 5*time.Second)

	if c, err := dialPeer(addr, []byte(wrongToken)); err == nil {
		_ = c.Close()
		t.Fatal("dialing with a wrong token succeeded")
	}

	// Replay: a recorded proof fails on a new connection, whose acceptor
	// nonce is fresh.
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

	// The counter moves before the refusal is logged: wait for both.
	poll(t, 5*time.Second, "four refusals", func() bool {
		_, all := refusals(logs)
		return s.refused.Load() >= 4 && all >= 4
	}, func() string { return fmt.Sprint(s.refused.Load(), " refused") })
	if warn, all := refusals(logs); warn != 1 || all != 4 || s.refused.Load() != 4 {
		t.Fatalf("%d warn and %d refusal log entries, %d refused; want 1 warn (one host) and 4 refusals", warn, all, s.refused.Load())
	}
	select {
	case m := <-got:
		t.Fatalf("a message got through from %d past a refused handshake", m.GetFrom())
	default:
	}

	// close ends a handshake in progress.
	pending, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Close()
	// Until the loop has accepted it, the connection sits in the kernel's
	// backlog, and closing the listener resets it: wait for the handshake
	// (or its end at the handshake's timeout, a fifth refusal: closed by
	// the transport, which the read below sees the same).
	poll(t, 5*time.Second, "the handshake to start", func() bool {
		return len(s.handshakes) == 1 || s.refused.Load() >= 5
	}, func() string { return fmt.Sprint(len(s.handshakes), " pending") })
	closeS()
	readsEOF(t, pending, 5*time.Second)
}
