package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
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
	booted  chan struct{}
	lnSet   *listen.Set // nil: accept errors are only retried

	conns      atomic.Int64
	refused    atomic.Uint64
	violations atomic.Uint64
	nextID     atomic.Uint64
	reg        registry
	perIP      ipCounts
	authLim    *authlimit.Limiter // failed auth per IP; nil when off or no auth
	loops      loops

	ln      net.Listener   // guarded: Accept retries EMFILE and the like
	lnGuard *listen.Guard  // the guard under ln
	acceptW sync.WaitGroup // the accept loop
	tlsW    sync.WaitGroup // TLS transport only: its connections

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
}

// New returns a server for be; Start runs it.
func New(cfg Config, be backend.Backend, log *zap.Logger, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	if be == nil {
		return nil, errors.New("server: no backend")
	}
	s := &Server{cfg: cfg, be: be, log: log,
		booted: make(chan struct{}), stop: make(chan struct{}),
		kick: make(chan struct{}, 1), statsSem: make(chan struct{}, cfg.StatsConcurrency)}
	for _, o := range opts {
		o(s)
	}
	if s.budget == nil {
		s.budget = budget.New(cfg.MaxOutput)
	}
	if be.Replicated() {
		s.nextID.Store(ownerBase())
	}
	s.batcher, _ = be.(backend.AnswerBatcher)
	s.reg.init()
	if cfg.AuthToken != "" && cfg.AuthFailuresPerMinute > 0 {
		s.authLim = authlimit.New(cfg.AuthFailuresPerMinute, authlimit.DefaultMaxIPs)
	}
	return s, nil
}

// Start listens and serves in the background. It returns once the server
// accepts connections, or with the reason it could not.
//
// latchd runs its own accept loop rather than gnet's: gnet v2.10.0 shuts
// its engine down for good on the first accept error it does not expect
// (EMFILE among them), dropping every client. The loop accepts through a
// listen.Guard, which backs off and retries such errors, and enrolls each
// connection in the event loops of a gnet.Client with the same handler
// and options, so serving a connection is unchanged.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("server: listen %s: %w", s.cfg.Addr, err)
	}
	s.addr = ln.Addr().String()
	s.ln = s.lnSet.Wrap("tcp", ln)
	s.lnGuard, _ = s.ln.(*listen.Guard)
	if s.cfg.TLS != nil {
		return s.startTLS()
	}
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
	if err != nil {
		_ = s.ln.Close()
		return fmt.Errorf("server: start event loops: %w", err)
	}
	s.cli = cli
	close(s.booted)
	s.acceptW.Add(1)
	go s.accept()
	go s.sweep()
	return nil
}

// accept takes connections until the listener closes and hands each to
// an enroller. Enrolling waits for an event loop to run OnOpen, so one
// enroller per loop keeps every loop taking connections while this
// goroutine accepts the next.
func (s *Server) accept() {
	defer s.acceptW.Done()
	conns := make(chan net.Conn, 64)
	var enrollers sync.WaitGroup
	for range max(s.cfg.EventLoops, runtime.NumCPU()) {
		enrollers.Add(1)
		go func() {
			defer enrollers.Done()
			for c := range conns {
				s.enroll(c)
			}
		}()
	}
	defer enrollers.Wait()
	defer close(conns)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed: the guard retries everything else
		}
		conns <- c
	}
}

// enroll hands c to an event loop, which runs OnOpen.
func (s *Server) enroll(c net.Conn) {
	if _, err := s.cli.EnrollContext(c, nil); err != nil {
		// Enroll duplicates the descriptor, which fails for want of one
		// like an accept: the client is dropped, and the guard counts it
		// and backs the listener off.
		_ = c.Close() // EnrollContext closes c too; twice is harmless
		if g, ok := s.guard(); ok {
			g.Report(err)
		}
	}
}

// guard returns the listener's guard: the listener itself, or under the
// TLS listener.
func (s *Server) guard() (*listen.Guard, bool) {
	return s.lnGuard, s.lnGuard != nil
}

// OnBoot is called by gnet when the event loops start.
func (s *Server) OnBoot(gnet.Engine) gnet.Action { return gnet.None }

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
// the engine delivered to it (a Drain's errors, say): Stop closes
// connections without running their pending wake-ups, so a graceful stop
// settles first.
func (s *Server) Settle(ctx context.Context) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		pending := false
		s.reg.each(func(ss *session) {
			if ss.woken.Load() {
				pending = true
			}
		})
		if !pending {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Stop closes the listener and every connection (releasing what each
// held) and waits for the event loops to end, or for ctx.
func (s *Server) Stop(ctx context.Context) error {
	select {
	case <-s.booted:
	default:
		return errors.New("server: not started")
	}
	var err error
	s.stopOnce.Do(func() {
		close(s.stop)
		if s.cfg.TLS != nil {
			if err = s.stopTLS(ctx); err == nil {
				err = s.waitPending(ctx)
			}
			return
		}
		_ = s.ln.Close()
		s.acceptW.Wait() // no enroll races the client's stop
		done := make(chan error, 1)
		// Client.Stop closes every connection (OnClose runs for each) and
		// returns when the loops have ended, without gnet Engine.Stop's
		// 500 ms polling.
		go func() { done <- s.cli.Stop() }()
		select {
		case err = <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if q := s.answerQ.Load(); q != nil {
			// After the loops: answers they never ran. A runner set by a
			// racing OnOpen after this is refused by the closed queue.
			s.batcher.SetAnswerBatches(nil)
			q.close()
		}
		if err == nil {
			err = s.waitPending(ctx)
		}
	})
	return err
}

// waitPending waits, within ctx, for the requests the backend has yet to
// answer.
func (s *Server) waitPending(ctx context.Context) error {
	if s.inflight.Load() <= 0 {
		return nil
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for s.inflight.Load() > 0 {
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
	ss.loop = s.loops.of(c)
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
		s.conns.Add(-1)
		s.refuse(metrics.RefusedMaxConnections)
		s.debug("connection refused", zap.String("remote", remote.String()), zap.String("reason", "max connections"))
		return nil, false
	}
	ip := ""
	if s.cfg.MaxConnectionsPerIP > 0 {
		ip = hostOf(remote)
		if a := addrOf(remote); a.IsValid() {
			ip = authlimit.Key(a).String() // an IPv6 client is its /64
		}
		if !s.perIP.acquire(ip, s.cfg.MaxConnectionsPerIP) {
			s.conns.Add(-1)
			s.refuse(metrics.RefusedMaxConnectionsPerIP)
			s.debug("connection refused", zap.String("remote", remote.String()), zap.String("reason", "max connections per IP"))
			return nil, false
		}
	}
	ss := &session{conn: p, id: engine.OwnerID(s.nextID.Add(1)), authed: s.cfg.AuthToken == "", ip: ip,
		fd: -1, met: s.met, srv: s}
	if s.authLim != nil {
		ss.authIP = addrOf(remote)
	}
	s.reg.add(ss)
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
	if ss.ip != "" {
		s.perIP.release(ss.ip)
	}
	s.reg.remove(ss)
	if g, ok := s.guard(); ok {
		g.Freed() // a listener out of descriptors may accept again
	}
	s.forget(ss)
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

// addrOf returns a's IP (IPv4-mapped addresses unmapped), or the zero
// Addr when a carries none.
func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	ip, _ := netip.ParseAddr(hostOf(a))
	return ip.Unmap()
}

func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}

// ipCounts counts open connections per client IP.
type ipCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *ipCounts) acquire(ip string, max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]int)
	}
	if c.m[ip] >= max {
		return false
	}
	c.m[ip]++
	return true
}

func (c *ipCounts) release(ip string) {
	c.mu.Lock()
	if c.m[ip]--; c.m[ip] <= 0 {
		delete(c.m, ip)
	}
	c.mu.Unlock()
}

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
		s.reg.each(func(ss *session) {
			if s.cfg.WriteTimeout > 0 {
				s.wakeStalled(ss, wcutoff)
			}
			if since := ss.partialSince.Load(); since != 0 && since <= cutoff {
				ss.partialSince.Store(0)
				s.violation(metrics.ReasonReadTimeout)
				s.debug("protocol error", zap.Uint64("conn_id", uint64(ss.id)), zap.String("reason", "read timeout"))
				_ = ss.conn.Close() // concurrency-safe in gnet v2
			}
		})
	}
}

// registry holds every open session for the sweeper, in shards so that
// opening and closing connections on several loops rarely contend.
type registry struct {
	shards [32]struct {
		mu sync.Mutex
		m  map[*session]struct{}
	}
}

func (r *registry) init() {
	for i := range r.shards {
		r.shards[i].m = make(map[*session]struct{})
	}
}

func (r *registry) shard(ss *session) int { return int(uint64(ss.id) % uint64(len(r.shards))) }

func (r *registry) add(ss *session) {
	sh := &r.shards[r.shard(ss)]
	sh.mu.Lock()
	sh.m[ss] = struct{}{}
	sh.mu.Unlock()
}

func (r *registry) remove(ss *session) {
	sh := &r.shards[r.shard(ss)]
	sh.mu.Lock()
	delete(sh.m, ss)
	sh.mu.Unlock()
}

func (r *registry) each(fn func(*session)) {
	var batch []*session
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for ss := range sh.m {
			batch = append(batch, ss)
		}
		sh.mu.Unlock()
		for _, ss := range batch {
			fn(ss)
		}
		batch = batch[:0]
	}
}
