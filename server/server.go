package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/metrics"
	"github.com/latchd/latchd/replica"
)

// Server is the TCP front end of one engine.
type Server struct {
	gnet.BuiltinEventEngine

	cfg    Config
	eng    *engine.Engine
	log    *zap.Logger
	met    *metrics.TCP  // nil: record nothing
	node   *replica.Node // cluster mode; nil: s.eng is local
	gnet   gnet.Engine
	addr   string
	booted chan struct{}
	done   chan error

	conns      atomic.Int64
	refused    atomic.Uint64
	violations atomic.Uint64
	nextID     atomic.Uint64
	reg        registry
	perIP      ipCounts
	loops      loops

	// TLS transport only.
	ln   net.Listener
	tlsW sync.WaitGroup

	stopOnce sync.Once
	stop     chan struct{}
	// pending counts cluster mode's proposal goroutines (requests and
	// Disconnects), which Stop waits for: a Disconnect proposed as the
	// listener closes must reach the log before the node goes.
	pending sync.WaitGroup
}

// New returns a server for eng; Start runs it.
func New(cfg Config, eng *engine.Engine, log *zap.Logger, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{cfg: cfg, eng: eng, log: log,
		booted: make(chan struct{}), done: make(chan error, 1), stop: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	if s.node != nil {
		s.nextID.Store(ownerBase())
	} else if eng == nil {
		return nil, errors.New("server: no engine")
	}
	s.reg.init()
	return s, nil
}

// Start listens and serves in the background. It returns once the server
// accepts connections, or with the reason it could not.
func (s *Server) Start() error {
	if s.cfg.TLS != nil {
		return s.startTLS()
	}
	opts := []gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithNumEventLoop(s.cfg.Loops()),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(s.log.Sugar()),
		gnet.WithReuseAddr(true),
	}
	go func() { s.done <- gnet.Run(s, "tcp://"+s.cfg.Addr, opts...) }()
	select {
	case <-s.booted:
	case err := <-s.done:
		if err == nil {
			err = errors.New("stopped before it started")
		}
		return fmt.Errorf("server: listen %s: %w", s.cfg.Addr, err)
	}
	go s.sweep()
	return nil
}

// OnBoot records the engine and the bound address (port 0 picks one).
func (s *Server) OnBoot(eng gnet.Engine) gnet.Action {
	s.gnet = eng
	s.addr = s.cfg.Addr
	if fd, err := eng.Dup(); err == nil {
		f := os.NewFile(uintptr(fd), "listener")
		if ln, err := net.FileListener(f); err == nil {
			s.addr = ln.Addr().String()
			_ = ln.Close()
		}
		_ = f.Close()
	}
	close(s.booted)
	return gnet.None
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.addr }

// Connections returns the number of open connections.
func (s *Server) Connections() int { return int(s.conns.Load()) }

// Stop closes the listener and every connection (releasing what each
// held) and waits for the event loops to end, or for ctx.
func (s *Server) Stop(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		close(s.stop)
		if s.cfg.TLS != nil {
			if err = s.stopTLS(ctx); err == nil {
				err = s.waitPending(ctx)
			}
			return
		}
		err = s.gnet.Stop(ctx)
		if err == nil {
			select {
			case <-s.done:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if err == nil {
			err = s.waitPending(ctx)
		}
	})
	return err
}

// waitPending waits, within ctx, for the proposal goroutines.
func (s *Server) waitPending(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// OnOpen admits a connection and gives it a session.
func (s *Server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	ss, ok := s.open(c.RemoteAddr(), c)
	if !ok {
		return []byte("error\n"), gnet.Close
	}
	ss.loop = s.loops.of(c)
	if s.node == nil && s.cfg.DirectHandOff {
		ss.fd = c.Fd()
	}
	c.SetContext(ss)
	return nil, gnet.None
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
		if !s.perIP.acquire(ip, s.cfg.MaxConnectionsPerIP) {
			s.conns.Add(-1)
			s.refuse(metrics.RefusedMaxConnectionsPerIP)
			s.debug("connection refused", zap.String("remote", remote.String()), zap.String("reason", "max connections per IP"))
			return nil, false
		}
	}
	ss := &session{conn: p, id: engine.OwnerID(s.nextID.Add(1)), authed: s.cfg.AuthToken == "", ip: ip, cluster: s.node != nil,
		fd: -1, met: s.met}
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
	if s.node != nil {
		s.closeCluster(ss)
	} else {
		s.eng.DisconnectVia(now(), ss.id, s.cfg.AutoRelease, ss.via())
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
// ReadTimeout. It checks every quarter of ReadTimeout (at most once a
// second), so the close comes at most that much late.
func (s *Server) sweep() {
	every := min(s.cfg.ReadTimeout/4, time.Second)
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		cutoff := now() - int64(s.cfg.ReadTimeout)
		s.reg.each(func(ss *session) {
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
