package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/authlimit"
	"github.com/latchd/latchd/internal/budget"
	"github.com/latchd/latchd/internal/listen"
	"github.com/latchd/latchd/internal/metrics"
)

// Server is the TCP front end of one backend: a single node's engine or
// a replicated node (package backend); it never learns which.
type Server struct {
	gnet.BuiltinEventEngine

	cfg Config
	be  backend.Backend
	log *zap.Logger
	met *metrics.TCP // nil: record nothing
	// batcher is be, when it answers pending requests in batches: answerQ
	// then runs them on the event loop (answers.go), set at the first
	// connection, with one loop.
	batcher backend.AnswerBatcher
	answerQ atomic.Pointer[answerQueue]
	cli     *gnet.Client // the event loops plain TCP connections are enrolled in
	addr    string
	booted  atomic.Bool
	lnSet   *listen.Set   // nil: accept errors are only retried
	ln      net.Listener  // accepts through guard (and TLS, when on)
	guard   *listen.Guard // retries EMFILE and the like; nil until Start
	// running counts the accept loop and, on TLS, each connection's
	// goroutine.
	running sync.WaitGroup

	conns      atomic.Int64
	refused    atomic.Uint64
	violations atomic.Uint64
	nextID     atomic.Uint64
	reg        sync.Map // *session -> struct{}: every open session, for the sweeper
	perIP      authlimit.Conns
	authLim    *authlimit.Limiter // failed auth per IP; nil when off or no auth
	loops      sync.Map           // gnet.EventLoop -> *loop

	// Output bounds (output.go).
	budget   *budget.Budget
	kick     chan struct{} // one slot: the budget is over, enforce now
	statsSem chan struct{} // stats answers being built

	stopOnce sync.Once
	stop     chan struct{}
	// inflight counts the requests the backend answers later (Submit's
	// pending ones, Disconnects among them), which Stop waits for: a
	// Disconnect submitted as the listener closes must reach the log
	// before the node goes. It may pass through -1 while a loop's turn
	// runs (see submit), never once the loops have stopped.
	inflight atomic.Int64
	// cancels are the tagged cancel requests in flight (tagcancel.go).
	cancels cancelMarks
}

// New returns a server for be; Start runs it.
func New(cfg Config, be backend.Backend, log *zap.Logger, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = cmp.Or(log, zap.NewNop())
	if be == nil {
		return nil, errors.New("server: no backend")
	}
	s := &Server{cfg: cfg, be: be, log: log,
		stop: make(chan struct{}), kick: make(chan struct{}, 1), statsSem: make(chan struct{}, cfg.StatsConcurrency)}
	for _, o := range opts {
		o(s)
	}
	s.budget = cmp.Or(s.budget, budget.New(cfg.MaxOutput))
	if be.Replicated() {
		s.nextID.Store(ownerBase())
	}
	s.batcher, _ = be.(backend.AnswerBatcher)
	if cfg.AuthToken != "" && cfg.AuthFailuresPerMinute > 0 {
		s.authLim = authlimit.New(cfg.AuthFailuresPerMinute, authlimit.DefaultMaxIPs)
	}
	return s, nil
}

// Start listens and serves in the background. It returns once the server
// accepts connections, or with the reason it could not. It accepts
// through a listen.Guard and enrolls connections in a gnet.Client's
// loops: gnet's own accept loop stops the engine on EMFILE.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("server: listen %s: %w", s.cfg.Addr, err)
	}
	s.addr = ln.Addr().String()
	s.guard = s.lnSet.Wrap("tcp", ln).(*listen.Guard)
	s.ln = s.guard
	if s.cfg.TLS != nil {
		s.ln = tls.NewListener(s.guard, s.cfg.TLS)
	} else if err := s.startLoops(); err != nil {
		_ = s.ln.Close()
		return fmt.Errorf("server: start event loops: %w", err)
	}
	s.booted.Store(true)
	s.running.Go(s.accept)
	go s.sweep()
	return nil
}

// startLoops starts the gnet event loops connections are enrolled in.
func (s *Server) startLoops() error {
	opts := []gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithNumEventLoop(s.cfg.Loops()),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(s.log.Sugar()),
	}
	if s.cfg.SendBuffer > 0 {
		// Enroll applies it to each connection's descriptor.
		opts = append(opts, gnet.WithSocketSendBuffer(s.cfg.SendBuffer))
	}
	cli, err := gnet.NewClient(s, opts...)
	if err == nil {
		err = cli.Start()
	}
	s.cli = cli
	return err
}

// accept takes connections until the listener closes. A TLS connection
// gets its own goroutine (tls.go); a plain one goes to an enroller, one
// per loop, since enrolling waits for the loop to run OnOpen.
func (s *Server) accept() {
	serve := func(c net.Conn) { s.running.Go(func() { s.serveTLS(c) }) }
	if s.cfg.TLS == nil {
		conns := make(chan net.Conn, 64)
		var enrollers sync.WaitGroup
		for range max(s.cfg.EventLoops, runtime.NumCPU()) {
			enrollers.Go(func() {
				for c := range conns {
					s.enroll(c)
				}
			})
		}
		defer enrollers.Wait()
		defer close(conns)
		serve = func(c net.Conn) { conns <- c }
	}
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		serve(c)
	}
}

// enroll hands c to an event loop, which runs OnOpen.
func (s *Server) enroll(c net.Conn) {
	if _, err := s.cli.EnrollContext(c, nil); err != nil {
		// Enroll duplicates the descriptor, which fails for want of one
		// like an accept: the client is dropped, and the guard counts it
		// and backs the listener off.
		_ = c.Close() // EnrollContext closes c too; twice is harmless
		s.guard.Report(err)
	}
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.addr }

// Connections returns the number of open connections.
func (s *Server) Connections() int { return int(s.conns.Load()) }

// StopAccepting closes the listener: connections already open are served
// until Stop. It is the first step of a graceful stop.
func (s *Server) StopAccepting() {
	if s.ln != nil {
		_ = s.ln.Close()
	}
}

// Settle waits, within ctx, until every connection has taken the answers
// delivered to it (a Drain's errors, say), which Stop would drop.
func (s *Server) Settle(ctx context.Context) error {
	return poll(ctx, func() bool {
		for ss := range s.sessions {
			if ss.woken.Load() {
				return false
			}
		}
		return true
	})
}

// Stop closes the listener and every connection (releasing what each
// held) and waits for the event loops to end, or for ctx.
func (s *Server) Stop(ctx context.Context) error {
	if !s.booted.Load() {
		return errors.New("server: not started")
	}
	var err error
	s.stopOnce.Do(func() {
		close(s.stop)
		_ = s.ln.Close()
		if s.cfg.TLS != nil {
			for ss := range s.sessions {
				_ = ss.conn.Close()
			}
			err = await(ctx, func() error { s.running.Wait(); return nil })
		} else {
			s.running.Wait() // no enroll races the client's stop
			// Client.Stop closes every connection (OnClose runs for each)
			// and returns when the loops have ended, without gnet
			// Engine.Stop's 500 ms polling.
			err = await(ctx, s.cli.Stop)
			if q := s.answerQ.Load(); q != nil {
				// After the loops: answers they never ran. A runner set by
				// a racing OnOpen after this is refused by the closed queue.
				s.batcher.SetAnswerBatches(nil)
				q.close()
			}
		}
		if err == nil {
			// The requests the backend has yet to answer.
			err = poll(ctx, func() bool { return s.inflight.Load() <= 0 })
		}
	})
	return err
}

// await runs fn on its own goroutine and returns its error, or ctx's if
// ctx ends first.
func await(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poll waits, within ctx, until done reports true, checking every
// millisecond.
func poll(ctx context.Context, done func() bool) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// OnOpen admits a connection and gives it a session.
func (s *Server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	ss, ok := s.open(c.RemoteAddr(), c)
	if !ok {
		return []byte("error\n"), gnet.Close
	}
	ss.loop = s.loopOf(c)
	if s.batcher != nil && s.answerQ.Load() == nil && s.cfg.Loops() == 1 {
		s.answersOnLoop(c.EventLoop())
	}
	if s.cfg.DirectHandOff {
		ss.fd = c.Fd()
	}
	c.SetContext(ss)
	return nil, gnet.None
}

// answersOnLoop hands the backend's answer batches to el, once.
func (s *Server) answersOnLoop(el gnet.EventLoop) {
	if el == nil {
		return
	}
	q := newAnswerQueue(el)
	if s.answerQ.CompareAndSwap(nil, q) {
		q.on.Store(s.batcher.SetAnswerBatches(q.put))
	}
}

// OnClose releases what the connection held.
func (s *Server) OnClose(c gnet.Conn, err error) gnet.Action {
	if ss, ok := c.Context().(*session); ok {
		ss.revoke() // before gnet closes the fd
		s.close(ss, err)
		s.drain(ss.loop) // waiters on this loop that the disconnect granted
	}
	return gnet.None
}

// open admits a connection under MaxConnections and MaxConnectionsPerIP
// and registers its session. It reports false for a refused connection.
func (s *Server) open(remote net.Addr, p peer) (*session, bool) {
	n := s.conns.Add(1)
	if max := s.cfg.MaxConnections; max > 0 && n > int64(max) {
		return s.refuse(remote, metrics.RefusedMaxConnections, "max connections")
	}
	var ip net.Addr
	if max := s.cfg.MaxConnectionsPerIP; max > 0 {
		ip = remote
		if s.perIP.Add(ip, 1) > max {
			s.perIP.Add(ip, -1)
			return s.refuse(remote, metrics.RefusedMaxConnectionsPerIP, "max connections per IP")
		}
	}
	ss := &session{conn: p, id: engine.OwnerID(s.nextID.Add(1)), authed: s.cfg.AuthToken == "", ip: ip,
		fd: -1, met: s.met, srv: s}
	if s.authLim != nil {
		ss.authIP = authlimit.AddrOf(remote)
	}
	s.reg.Store(ss, struct{}{})
	if s.met != nil {
		s.met.Opened()
	}
	s.debug("connection opened", zap.Uint64("conn_id", uint64(ss.id)), zap.String("remote", remote.String()))
	return ss, true
}

// close releases what the connection held (or, without AutoRelease, only
// withdraws its waits) and forgets it.
func (s *Server) close(ss *session, err error) {
	s.conns.Add(-1)
	if s.met != nil {
		s.met.Closed()
	}
	if ss.ip != nil {
		s.perIP.Add(ss.ip, -1)
	}
	s.reg.Delete(ss)
	if s.guard != nil {
		s.guard.Freed() // a listener out of descriptors may accept again
	}
	s.forget(ss)
	ss.endWatch()
	ss.closed.Store(true)
	// Nothing of a connection that made no request is in the state. One
	// with a request still pending is undone by its answer (answered1).
	if ss.used && ss.inflight.Load() <= 0 {
		s.disconnect(ss, ss.via())
	}
	s.debug("connection closed", zap.Uint64("conn_id", uint64(ss.id)), zap.Error(err))
}

// debug logs at debug level without building fields when it is off.
func (s *Server) debug(msg string, fields ...zap.Field) {
	if ce := s.log.Check(zap.DebugLevel, msg); ce != nil {
		ce.Write(fields...)
	}
}

// Refused returns how many connections were refused by a connection cap.
func (s *Server) Refused() uint64 { return s.refused.Load() }

// Violations returns how many connections were closed for a protocol
// violation (bad request, failed auth, read timeout, parked overflow).
func (s *Server) Violations() uint64 { return s.violations.Load() }

// sweep closes connections that sat on a partial request for longer than
// ReadTimeout, and wakes those whose answers waited past WriteTimeout
// (their loop closes them). It checks every quarter of the shorter timeout
// (at most once a second), so the close comes at most that much late. It
// also enforces the output budget, at once when a turn finds it over.
func (s *Server) sweep() {
	every := min(s.cfg.ReadTimeout/4, time.Second)
	if s.cfg.WriteTimeout > 0 {
		every = min(every, s.cfg.WriteTimeout/4)
	}
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			s.enforce()
			continue
		case <-t.C:
		}
		s.enforce()
		cutoff := now() - int64(s.cfg.ReadTimeout)
		wcutoff := now() - int64(s.cfg.WriteTimeout)
		for ss := range s.sessions {
			if since := ss.stallSince.Load(); s.cfg.WriteTimeout > 0 && since != 0 && since <= wcutoff {
				_ = ss.conn.Wake(nil)
			}
			if since := ss.partialSince.Load(); since != 0 && since <= cutoff {
				ss.partialSince.Store(0)
				s.violation(metrics.ReasonReadTimeout)
				s.debug("protocol error", zap.Uint64("conn_id", uint64(ss.id)), zap.String("reason", "read timeout"))
				_ = ss.conn.Close() // concurrency-safe in gnet v2
			}
		}
	}
}

// sessions yields every open session.
func (s *Server) sessions(yield func(*session) bool) {
	s.reg.Range(func(k, _ any) bool { return yield(k.(*session)) })
}
