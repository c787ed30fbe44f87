package replica

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
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

	good, err := peer.Dial(addr, 2*time.Second)
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

	if c, err := wrong.Dial(addr, 2*time.Second); err == nil {
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

	// The counter moves before the refusal is logged: wait for both.
	poll(t, 5*time.Second, "four refusals", func() bool {
		_, all := refusals(logs)
		return s.refused.Load() >= 4 && all >= 4
	}, func() string { return fmt.Sprint(s.refused.Load(), " refused") })
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
	// Until the loop has accepted it, the connection sits in the kernel's
	// backlog, and closing the listener resets it: wait for the handshake
	// (or its end at the handshake's timeout, a fifth refusal: closed by
	// the layer, which the read below sees the same).
	poll(t, 5*time.Second, "the handshake to start", func() bool {
		return len(s.sem) == 1 || s.refused.Load() >= 5
	}, func() string { return fmt.Sprint(len(s.sem), " pending") })
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
