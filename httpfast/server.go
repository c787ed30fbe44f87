package httpfast

import (
	"cmp"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/internal/authlimit"
	"github.com/latchd/latchd/internal/budget"
	"github.com/latchd/latchd/internal/listen"
	"github.com/latchd/latchd/internal/metrics"
)

// Server is the REST API over one backend.Backend. Build it with New.
type Server struct {
	cfg     Config
	be      backend.Backend // every engine mutation and read goes here
	log     *zap.Logger
	conns   func() int         // TCP connections, for stats and metrics
	auth    []byte             // "Bearer <token>", or nil when auth is off
	lim     *authlimit.Buckets // requests per IP; nil when rate limiting is off
	authLim *authlimit.Limiter // failed bearer tokens per IP; nil when off or no auth
	met     *httpMetrics
	reg     registry
	sinks   sync.Pool // of chanSink
	srv     *fasthttp.Server

	admin     backend.Admin // WithAdmin, else nil: the admin routes are 404
	adminAuth []byte        // "Bearer <admin token>"
	snapshot  SnapshotFunc  // WithSnapshot, else nil

	ready func() error // WithReadiness, else nil

	parked   atomic.Int64  // handlers blocked on a grant
	draining atomic.Bool   // Drain was called: /healthz answers 503
	lnSet    *listen.Set   // WithListeners; nil: /healthz ignores listeners
	guard    *listen.Guard // the REST listener's guard, set by Start
	watch    connWatch     // parked handlers' connections, for clients that leave

	// Stats bounds (stats.go).
	budget   *budget.Budget
	perIP    authlimit.Conns // open connections per client, when MaxConnectionsPerIP is on
	statsSem chan struct{}

	mu       sync.Mutex
	ln       net.Listener
	served   chan struct{} // closed when Serve returns
	stopping chan struct{} // closed by Stop: parked handlers give up
	stopped  bool
}

// New returns a server for be with cfg, which must be valid. It does not
// listen until Start.
func New(cfg Config, be backend.Backend, log *zap.Logger, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if be == nil || log == nil {
		return nil, errors.New("httpfast: nil backend or logger")
	}
	if o.admin != nil && (o.admin.admin == nil || o.admin.token == "") {
		return nil, errors.New("httpfast: the admin API needs a node and a non-empty token")
	}
	if o.connections == nil {
		o.connections = func() int { return 0 }
	}
	if o.metrics == nil {
		o.metrics = metrics.NewRegistryFunc(be.Engine)
	}
	s := &Server{
		cfg:      cfg,
		be:       be,
		log:      log,
		conns:    o.connections,
		ready:    o.ready,
		met:      newHTTPMetrics(o.metrics),
		stopping: make(chan struct{}),
		lnSet:    o.listeners,
		budget:   cmp.Or(o.budget, budget.New(cfg.MaxOutput)),
		statsSem: make(chan struct{}, cfg.StatsConcurrency),
	}
	if cfg.AuthToken != "" {
		s.auth = []byte("Bearer " + cfg.AuthToken)
	}
	if o.admin != nil {
		s.admin = o.admin.admin
		s.adminAuth = []byte("Bearer " + o.admin.token)
	}
	if !s.applySnapshotOption(&o) {
		return nil, errors.New("httpfast: the snapshot route needs a non-empty admin token")
	}
	if cfg.AuthFailuresPerMinute > 0 && (cfg.AuthToken != "" || s.adminAuth != nil) {
		s.authLim = authlimit.New(cfg.AuthFailuresPerMinute, authlimit.DefaultMaxIPs)
	}
	if cfg.RateLimitPerIP > 0 {
		burst := cmp.Or(cfg.RateLimitBurst, max(1, int(math.Ceil(cfg.RateLimitPerIP))))
		s.lim = authlimit.NewBuckets(cfg.RateLimitPerIP, burst, cfg.RateLimitMaxIPs)
	}
	s.reg.init(be.Replicated())
	s.sinks.New = func() any { return make(chanSink, 1) }
	s.srv = &fasthttp.Server{
		Handler:              s.handle,
		ErrorHandler:         s.handleParseError,
		Name:                 "latchd",
		Concurrency:          cfg.MaxConnections,
		ReadTimeout:          cfg.ReadTimeout,
		WriteTimeout:         cfg.WriteTimeout,
		IdleTimeout:          cfg.ReadTimeout,
		MaxRequestBodySize:   cfg.MaxBodyBytes,
		NoDefaultContentType: true,
		CloseOnShutdown:      true,
		Logger:               fasthttpLogger{log.Sugar()},
		ConnState:            s.connState,
	}
	return s, nil
}

// Start listens on Config.Addr and serves in the background. It returns
// once the socket is bound.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil || s.stopped {
		return ErrStarted
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("httpfast: listen %s: %w", s.cfg.Addr, err)
	}
	if s.cfg.SendBuffer > 0 {
		ln = sendBufferListener{ln.(*net.TCPListener), s.cfg.SendBuffer}
	}
	// Guarded: an accept error (EMFILE) is backed off and retried; fasthttp
	// would end Serve on it.
	ln = s.lnSet.Wrap("http", ln)
	s.guard, _ = ln.(*listen.Guard)
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	s.ln = ln
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil {
			s.log.Error("http serve", zap.Error(err))
		}
	}()
	s.log.Info("http listening", zap.String("addr", ln.Addr().String()))
	return nil
}

// Addr returns the bound address, host:port, or "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Sessions returns the number of session names the server holds.
func (s *Server) Sessions() int { return s.reg.len() }

// Stop stops accepting, makes every parked request give up, closes every
// session (see closeAllSessions) and waits for in-flight requests until
// ctx ends. Over a replicated backend the node must still run.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.ln == nil {
		s.mu.Unlock()
		return ErrNotStarted
	}
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	close(s.stopping)
	s.mu.Unlock()

	// Let Serve return before fasthttp's shutdown, which would otherwise
	// count it as an open connection and wait a 100 ms tick for nothing.
	_ = s.ln.Close()
	select {
	case <-s.served:
	case <-ctx.Done():
	}
	errc := make(chan error, 1)
	go func() { errc <- s.srv.ShutdownWithContext(ctx) }()
	s.closeAllSessions()
	err := <-errc
	select {
	case <-s.served:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	if err != nil {
		return fmt.Errorf("httpfast: shutdown: %w", err)
	}
	return nil
}

// handle is the fasthttp handler: match, rate-limit, authenticate,
// dispatch, and time the request under its route's name.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	o, param, allow := match(ctx.Method(), ctx.URI().PathOriginal())
	admin := false
	if o == opNotFound && s.adminAuth != nil {
		o, param, allow = s.matchAdminRoute(ctx.Method(), ctx.URI().PathOriginal())
		admin = o != opNotFound // an admin route, or one with another method
	}
	if s.admit(ctx, o, admin, start) {
		s.dispatch(ctx, o, param, allow)
	}
	s.met.observe(o, ctx.Response.StatusCode(), start)
}

// admit applies the per-IP rate limit and the bearer token: the admin
// token on the admin routes, the client token on the others. /healthz and
// /readyz are exempt from both, /v1/openapi.json and the dashboard's
// static files (which hold no data) from auth only.
func (s *Server) admit(ctx *fasthttp.RequestCtx, o op, admin bool, now time.Time) bool {
	if o == opHealthz || o == opReadyz {
		return true
	}
	if s.lim != nil {
		ip, _ := netip.AddrFromSlice(ctx.RemoteIP())
		if ok, wait := s.lim.Allow(authlimit.Key(ip), now); !ok {
			retryAfter(ctx, wait)
			writeError(ctx, errRateLimited, "too many requests from this address")
			return false
		}
	}
	want := s.auth
	if admin {
		want = s.adminAuth
	}
	if want != nil && o != opOpenAPI && o != opUI {
		var ip netip.Addr
		if s.authLim != nil {
			// An IP that failed too often is refused without a
			// comparison, so guessing tokens costs it time.
			ip, _ = netip.AddrFromSlice(ctx.RemoteIP())
			if blocked, wait := s.authLim.Blocked(ip, now); blocked {
				retryAfter(ctx, wait)
				writeError(ctx, errRateLimited, "too many failed authentications from this address")
				return false
			}
		}
		got := ctx.Request.Header.Peek("Authorization")
		if subtle.ConstantTimeCompare(got, want) != 1 {
			if s.authLim != nil {
				s.authLim.Failed(ip, now)
			}
			ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="latchd"`)
			writeError(ctx, errUnauthorized, "missing or wrong bearer token")
			return false
		}
	}
	return true
}

// retryAfter sets Retry-After to wait, rounded up to whole seconds (>= 1).
func retryAfter(ctx *fasthttp.RequestCtx, wait time.Duration) {
	secs := max(1, int64((wait+time.Second-1)/time.Second))
	var buf [20]byte
	ctx.Response.Header.SetBytesV("Retry-After", strconv.AppendInt(buf[:0], secs, 10))
}

func (s *Server) dispatch(ctx *fasthttp.RequestCtx, o op, param []byte, allow string) {
	if o.proposes() && !s.be.IsLeader() {
		writeNotLeader(ctx, s.be.LeaderAddrs().HTTPAddr)
		return
	}
	if o.reads() && !s.consistentRead(ctx) {
		return
	}
	switch o {
	case opNotFound:
		writeError(ctx, errNotFound, "no such route")
	case opBadMethod:
		ctx.Response.Header.Set("Allow", allow)
		writeError(ctx, errMethodNotAllowed, "method not allowed on this route")
	case opHealthz:
		s.healthz(ctx)
	case opReadyz:
		s.serveReadyz(ctx)
	case opUI:
		s.serveUI(ctx, param)
	case opUIKeys:
		s.serveUIKeys(ctx)
	case opLockGet, opSemGet, opRWGet:
		s.serveKey(ctx, o, param)
	case opWatch:
		s.serveWatch(ctx, param)
	case opMetrics:
		s.serveMetrics(ctx)
	case opStats:
		s.serveStats(ctx)
	case opOpenAPI:
		ctx.Response.Header.SetContentTypeBytes(contentJSON)
		writeStatic(ctx, openAPIDoc)
	case opSessionCreate:
		s.createSession(ctx)
	case opSessionDelete:
		s.deleteSession(ctx, param)
	case opSessionKeepalive:
		s.keepalive(ctx, param)
	case opAdminCluster, opAdminAddVoter, opAdminRemoveVoter, opAdminTransfer, opAdminDigest:
		s.adminOp(ctx, o, param)
	case opAdminSnapshot:
		s.serveSnapshot(ctx)
	case opMulti:
		s.multiOp(ctx)
	default:
		s.lockOp(ctx, o, param)
	}
}

// connState tells the listener's guard when a connection closed: a
// listener backing off for want of descriptors may accept again.
func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	if max := s.cfg.MaxConnectionsPerIP; max > 0 {
		// fasthttp calls StateNew on its accept goroutine and StateClosed
		// once for every connection it was called for, refused or not.
		switch st {
		case fasthttp.StateNew:
			if s.perIP.Add(c.RemoteAddr(), 1) > max {
				refusePerIP(c)
			}
		case fasthttp.StateClosed:
			s.perIP.Add(c.RemoteAddr(), -1)
		}
	}
	if st == fasthttp.StateClosed && s.guard != nil {
		s.guard.Freed()
	}
}

// respPerIP is the answer to a connection over MaxConnectionsPerIP.
var respPerIP = []byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\n" +
	"Connection: close\r\nContent-Length: 80\r\n\r\n" +
	`{"error":"rate_limited","message":"too many open connections from this address"}`)

// refusePerIP answers a connection over the per-IP cap 429, within a short
// deadline, and closes it; a TLS connection is closed without an answer
// (writing would run its handshake on the accept goroutine).
func refusePerIP(c net.Conn) {
	if _, ok := c.(*tls.Conn); !ok {
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		_, _ = c.Write(respPerIP)
	}
	_ = c.Close()
}

// Drain marks the server as stopping: /healthz answers 503 shutting_down
// from now on. The engine's Drain makes the lock routes answer it.
func (s *Server) Drain() { s.draining.Store(true) }

// healthz answers GET /healthz: 200 while every listener accepts; 503
// naming the listeners in backoff after an accept error (out of file
// descriptors, say), or shutting_down once a graceful stop began.
func (s *Server) healthz(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() {
		writeError(ctx, errShuttingDown, "the server is stopping")
		return
	}
	down := s.lnSet.Down()
	if len(down) == 0 {
		writeJSON(ctx, fasthttp.StatusOK, bodyOK)
		return
	}
	b := append(make([]byte, 0, 96), `{"error":"listener_down","message":"not accepting connections","listeners":[`...)
	for i, name := range down {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, name) // names are ours: plain ASCII
	}
	b = append(b, "]}"...)
	writeJSON(ctx, fasthttp.StatusServiceUnavailable, b)
}

// handleParseError answers a request fasthttp could not read: a body over
// MaxBodyBytes, a malformed header or a broken chunked body. fasthttp then
// closes the connection.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	if ce := s.log.Check(zap.DebugLevel, "http bad request"); ce != nil {
		ce.Write(zap.Error(err))
	}
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, errBodyTooLarge, "request body exceeds the limit")
		return
	}
	writeError(ctx, errBadRequest, "malformed HTTP request")
}

// fasthttpLogger sends fasthttp's own messages to zap at debug level:
// they are about single connections.
type fasthttpLogger struct{ l *zap.SugaredLogger }

func (f fasthttpLogger) Printf(format string, args ...any) { f.l.Debugf(format, args...) }
