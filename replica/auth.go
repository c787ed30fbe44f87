package replica

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"go.uber.org/zap"
)

// The raft transport handshake (see below).
const (
	authMagic       = "LTCHRAFT"
	authVersion     = 1
	authNonceLen    = 32
	authHelloLen    = len(authMagic) + 1 + authNonceLen
	authProofLen    = sha256.Size
	authLabelDialer = "latchd raft v1 dialer"
	authLabelAccept = "latchd raft v1 acceptor"
	authTimeout     = 5 * time.Second // the acceptor's bound on one handshake
	authMaxPending  = 64              // handshakes in progress at once
	authMaxWarned   = 1024            // hosts remembered as already logged
	authMinTokenLen = 16
)

var (
	errAuthHello = errors.New("not a latchd raft peer with an auth token (bad hello)")
	errAuthProof = errors.New("wrong auth token (bad proof)")
)

// With an auth token (Storage.key) the transport hands raft only
// connections whose peer has proved it knows the cluster's token, and
// proves it in turn to every peer it dials.
//
// The handshake, before any raft byte, on every connection:
//
//	dialer   -> acceptor: magic "LTCHRAFT", version 1, nonce Nd (32 random bytes)
//	acceptor -> dialer:   magic, version, nonce Na (32 random bytes)
//	dialer   -> acceptor: HMAC-SHA256(token, "latchd raft v1 dialer"   | Nd | Na)
//	acceptor -> dialer:   HMAC-SHA256(token, "latchd raft v1 acceptor" | Nd | Na)
//
// The acceptor sends its proof only after checking the dialer's (in
// constant time); either side closes on a bad hello or proof. Fresh
// nonces make a recorded proof useless and the two labels keep a proof
// from being reflected. It authenticates, it does not encrypt or sign the
// raft traffic that follows.
//
// Each handshake runs on its connection's goroutine, at most
// authMaxPending at once, each bounded by handshakeWait; a failure is
// logged at warn once per remote host.

// advertisable checks that ln's address, or advertise if set, is one a
// peer can dial.
func advertisable(ln net.Listener, advertise string) error {
	addr, ok := ln.Addr().(*net.TCPAddr)
	if advertise != "" {
		var err error
		if addr, err = net.ResolveTCPAddr("tcp", advertise); err != nil {
			return fmt.Errorf("replica: advertise address: %w", err)
		}
		ok = true
	}
	if !ok || addr.IP == nil || addr.IP.IsUnspecified() {
		return fmt.Errorf("replica: transport: %v is not an advertisable TCP address; set an advertise address", addr)
	}
	return nil
}

// dialPeer connects to addr and, with a key, runs the dialer's half of the
// handshake, all within dialTimeout.
func dialPeer(addr string, key []byte) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil || key == nil {
		return c, err
	}
	_ = c.SetDeadline(time.Now().Add(dialTimeout))
	if err := dialHandshake(c, key); err != nil {
		_ = c.Close() // the handshake error is the one to report
		return nil, fmt.Errorf("replica: raft handshake with %s: %w", addr, err)
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// authenticate runs the acceptor's half of the handshake on c, within
// handshakeWait, and frees its handshake slot. A failed one is refused.
func (t *transport) authenticate(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(t.handshakeWait))
	err := acceptHandshake(c, t.st.key)
	if err == nil {
		err = c.SetDeadline(time.Time{})
	}
	<-t.handshakes
	if err != nil {
		t.refuse(c.RemoteAddr(), err)
	}
	return err == nil
}

// refuse counts a refused connection and logs it at warn, once per host.
func (t *transport) refuse(addr net.Addr, err error) {
	t.refused.Add(1)
	host := addr.String()
	if h, _, e := net.SplitHostPort(host); e == nil {
		host = h
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return // a handshake cut short by close
	}
	_, seen := t.warned[host]
	if !seen {
		if len(t.warned) >= authMaxWarned {
			clear(t.warned)
		}
		t.warned[host] = struct{}{}
	}
	t.mu.Unlock()
	if seen {
		t.log.Debug("raft transport: refused a connection", zap.String("peer", addr.String()), zap.Error(err))
		return
	}
	t.log.Warn("raft transport: refused a connection that failed authentication; further refusals from this host are logged at debug",
		zap.String("peer", addr.String()), zap.Error(err))
}

// authProof is HMAC-SHA256(key, label | nd | na).
func authProof(key []byte, label string, nd, na []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	m.Write(nd)
	m.Write(na)
	return m.Sum(nil)
}

// authHello returns magic, version and a fresh nonce, and the nonce.
func authHello() (hello, nonce []byte) {
	hello = make([]byte, authHelloLen)
	copy(hello, authMagic)
	hello[len(authMagic)] = authVersion
	nonce = hello[len(authMagic)+1:]
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails (Go 1.24+)
	return hello, nonce
}

// readHello reads a peer's hello and returns its nonce.
func readHello(r io.Reader) ([]byte, error) {
	b := make([]byte, authHelloLen)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	if string(b[:len(authMagic)]) != authMagic || b[len(authMagic)] != authVersion {
		return nil, errAuthHello
	}
	return b[len(authMagic)+1:], nil
}

// dialHandshake is the dialer's half of the handshake.
func dialHandshake(c net.Conn, key []byte) error {
	hello, nd := authHello()
	if _, err := c.Write(hello); err != nil {
		return err
	}
	na, err := readHello(c)
	if err != nil {
		return err
	}
	if _, err := c.Write(authProof(key, authLabelDialer, nd, na)); err != nil {
		return err
	}
	got := make([]byte, authProofLen)
	if _, err := io.ReadFull(c, got); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("peer refused our proof (is its auth token the same?): %w", err)
		}
		return err
	}
	if subtle.ConstantTimeCompare(got, authProof(key, authLabelAccept, nd, na)) != 1 {
		return fmt.Errorf("peer: %w", errAuthProof)
	}
	return nil
}

// acceptHandshake is the acceptor's half of the handshake.
func acceptHandshake(c net.Conn, key []byte) error {
	nd, err := readHello(c)
	if err != nil {
		return err
	}
	hello, na := authHello()
	if _, err := c.Write(hello); err != nil {
		return err
	}
	got := make([]byte, authProofLen)
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(got, authProof(key, authLabelDialer, nd, na)) != 1 {
		return errAuthProof
	}
	_, err = c.Write(authProof(key, authLabelAccept, nd, na))
	return err
}
