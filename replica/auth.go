package replica

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The raft transport handshake (see authStreamLayer).
const (
	authMagic         = "LTCHRAFT"
	authVersion       = 1
	authNonceLen      = 32
	authHelloLen      = len(authMagic) + 1 + authNonceLen
	authProofLen      = sha256.Size
	authLabelDialer   = "latchd raft v1 dialer"
	authLabelAccept   = "latchd raft v1 acceptor"
	authTimeout       = 5 * time.Second // the acceptor's bound on one handshake
	authMaxPending    = 64              // handshakes in progress at once
	authMaxWarned     = 1024            // hosts remembered as already logged
	authMinTokenLen   = 16
	authAcceptBackoff = time.Second // the most the accept loop waits after an error
)

var (
	errAuthHello = errors.New("not a latchd raft peer with an auth token (bad hello)")
	errAuthProof = errors.New("wrong auth token (bad proof)")
)

// authStreamLayer is a TCP listener (and dialer) that hands the raft
// transport only connections whose peer has proved it knows the cluster's
// auth token, and proves it in turn to every peer it dials.
//
// The handshake, before any raft byte, on every connection:
//
//	dialer   -> acceptor: magic "LTCHRAFT", version 1, nonce Nd (32 random bytes)
//	acceptor -> dialer:   magic, version, nonce Na (32 random bytes)
//	dialer   -> acceptor: HMAC-SHA256(token, "latchd raft v1 dialer"   | Nd | Na)
//	acceptor -> dialer:   HMAC-SHA256(token, "latchd raft v1 acceptor" | Nd | Na)
//
// The acceptor sends its proof only after checking the dialer's (in
// constant time); either side closes the connection on a bad hello or a
// bad proof. The token never crosses the wire; a recorded proof is useless
// on another connection (the other side's nonce is fresh), and the two
// directions use different labels, so a proof cannot be reflected.
//
// This authenticates connections, it does not encrypt or sign the raft
// traffic that follows: an on-path attacker can still read or alter it.
//
// Accept never fails for a bad peer (the transport's accept loop would
// back off):
// handshakes run on their own goroutines, at most authMaxPending at once,
// each bounded by authTimeout; a failed one is closed and logged at warn
// once per remote host, and Accept waits for the next good connection.
type authStreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	key       []byte
	timeout   time.Duration
	log       *zap.Logger

	conns  chan net.Conn   // authenticated, waiting for Accept
	ctx    context.Context // done once Close begins
	cancel context.CancelFunc
	close  func() error  // Close's work, once
	sem    chan struct{} // one slot per handshake in progress
	wg     sync.WaitGroup

	mu     sync.Mutex
	warned map[string]struct{} // hosts whose refusal has been logged

	refused atomic.Uint64 // connections refused, for tests
}

// listenAuth listens on bind and starts accepting; timeout bounds each
// handshake.
func listenAuth(bind string, advertise net.Addr, token string, timeout time.Duration, log *zap.Logger) (*authStreamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("replica: transport: %w", err)
	}
	addr, ok := ln.Addr().(*net.TCPAddr)
	if advertise != nil {
		addr, ok = advertise.(*net.TCPAddr)
	}
	if !ok || addr.IP == nil || addr.IP.IsUnspecified() {
		_ = ln.Close() // the address error is the one to report
		return nil, fmt.Errorf("replica: transport: %v is not an advertisable TCP address; set an advertise address", addr)
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &authStreamLayer{ln: ln, advertise: advertise, key: []byte(token), timeout: timeout, log: log,
		conns: make(chan net.Conn), sem: make(chan struct{}, authMaxPending), warned: make(map[string]struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.close = sync.OnceValue(func() error {
		s.cancel() // ends Accept, and each handshake in progress (serve)
		err := s.ln.Close()
		s.wg.Wait()
		return err
	})
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Accept implements net.Listener: the next authenticated connection. It
// fails only once the layer is closed.
func (s *authStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: it stops listening, ends the handshakes
// in progress and waits for their goroutines.
func (s *authStreamLayer) Close() error { return s.close() }

// Addr implements net.Listener: the advertised address if set.
func (s *authStreamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.ln.Addr()
}

// Dial connects to address and runs the dialer's half of the handshake,
// all within timeout.
func (s *authStreamLayer) Dial(address string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", address)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := dialHandshake(c, s.key); err != nil {
		_ = c.Close() // the handshake error is the one to report
		return nil, fmt.Errorf("replica: raft handshake with %s: %w", address, err)
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func (s *authStreamLayer) acceptLoop() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off.
			delay = min(max(2*delay, 5*time.Millisecond), authAcceptBackoff)
			s.log.Warn("raft transport: accept failed", zap.Error(err), zap.Duration("retry_in", delay))
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		select {
		case s.sem <- struct{}{}:
		case <-s.ctx.Done():
			_ = c.Close()
			return
		}
		s.wg.Add(1) // the loop's own count keeps the group above zero
		go s.serve(c)
	}
}

// serve runs the acceptor's half of the handshake on c and hands c to
// Accept, or closes it. Close cuts the handshake short by closing c.
func (s *authStreamLayer) serve(c net.Conn) {
	defer s.wg.Done()
	stop := context.AfterFunc(s.ctx, func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(s.timeout))
	err := acceptHandshake(c, s.key)
	if err == nil {
		err = c.SetDeadline(time.Time{})
	}
	if !stop() && err == nil {
		err = net.ErrClosed // Close came as the handshake ended
	}
	<-s.sem
	if err != nil {
		_ = c.Close()
		s.refuse(c.RemoteAddr(), err)
		return
	}
	select {
	case s.conns <- c:
	case <-s.ctx.Done():
		_ = c.Close()
	}
}

// refuse counts a refused connection and logs it at warn, once per host.
func (s *authStreamLayer) refuse(addr net.Addr, err error) {
	s.refused.Add(1)
	if s.ctx.Err() != nil {
		return // a handshake cut short by Close
	}
	host := addr.String()
	if h, _, e := net.SplitHostPort(host); e == nil {
		host = h
	}
	s.mu.Lock()
	_, seen := s.warned[host]
	if !seen {
		if len(s.warned) >= authMaxWarned {
			clear(s.warned)
		}
		s.warned[host] = struct{}{}
	}
	s.mu.Unlock()
	if seen {
		s.log.Debug("raft transport: refused a connection", zap.String("peer", addr.String()), zap.Error(err))
		return
	}
	s.log.Warn("raft transport: refused a connection that failed authentication; further refusals from this host are logged at debug",
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
