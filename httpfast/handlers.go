package httpfast

import (
	"encoding/json"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/clock"
)

// chanSink parks a blocking request: the engine delivers its one Outcome
// into the slot and the handler's goroutine takes it out.
type chanSink chan engine.Outcome

// Deliver implements engine.Sink. It runs on whichever goroutine produced
// the outcome and never blocks: the engine delivers once per park, and
// the slot is empty whenever a sink is parked.
func (c chanSink) Deliver(o engine.Outcome) { c <- o }

// createSession answers POST /v1/sessions.
func (s *Server) createSession(ctx *fasthttp.RequestCtx) {
	if err := decodeBody(ctx.PostBody(), &struct{}{}); err != nil {
		writeError(ctx, errBadRequest, err.Error())
		return
	}
	id, owner, err := s.reg.create(s.eng, clock.Now(), s.cfg.SessionTTL)
	if err != nil {
		s.log.Error("open session", zap.Error(err))
		writeError(ctx, errInternal, "cannot open session")
		return
	}
	if ce := s.log.Check(zap.DebugLevel, "session opened"); ce != nil {
		ce.Write(zap.Uint64("owner", uint64(owner)))
	}
	var buf [respBufLen]byte
	b := append(buf[:0], `{"session_id":"`...)
	b = append(b, id...)
	b = append(b, `","ttl_s":`...)
	b = appendSeconds(b, s.cfg.SessionTTL)
	b = append(b, '}')
	writeJSON(ctx, fasthttp.StatusCreated, b)
}

// deleteSession answers DELETE /v1/sessions/{id}: it releases everything
// the session held and cancels its parked requests, as a disconnect does.
func (s *Server) deleteSession(ctx *fasthttp.RequestCtx, id []byte) {
	owner, ok := s.reg.remove(string(id))
	if !ok || !s.eng.CloseSession(clock.Now(), owner) {
		writeError(ctx, errSessionGone, "no such session (expired or deleted)")
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, bodyOK)
}

// keepalive answers POST /v1/sessions/{id}/keepalive.
func (s *Server) keepalive(ctx *fasthttp.RequestCtx, id []byte) {
	if err := decodeBody(ctx.PostBody(), &struct{}{}); err != nil {
		writeError(ctx, errBadRequest, err.Error())
		return
	}
	owner, ok := s.begin(ctx, id)
	if !ok {
		return
	}
	s.eng.EndSession(clock.Now(), owner)
	ttl, _ := s.eng.SessionTTL(owner) // a session just begun has a TTL
	var buf [respBufLen]byte
	b := append(buf[:0], `{"status":"ok","ttl_s":`...)
	b = appendSeconds(b, ttl)
	b = append(b, '}')
	writeJSON(ctx, fasthttp.StatusOK, b)
}

// sessionHeader returns the session id a request names.
func sessionHeader(ctx *fasthttp.RequestCtx) []byte {
	if id := ctx.Request.Header.Peek("X-Latchd-Session"); len(id) > 0 {
		return id
	}
	return ctx.Request.Header.Peek("X-Dflockd-Session")
}

// begin resolves a session id to its owner and marks a request of it in
// flight (the caller must EndSession). It answers session_gone itself and
// forgets the name when the engine has dropped the session.
func (s *Server) begin(ctx *fasthttp.RequestCtx, id []byte) (engine.OwnerID, bool) {
	owner, ok := s.reg.lookup(id)
	if !ok {
		writeError(ctx, errSessionGone, "no such session (expired or deleted)")
		return 0, false
	}
	if !s.eng.BeginSession(clock.Now(), owner) {
		s.reg.remove(string(id))
		writeError(ctx, errSessionGone, "session expired or deleted")
		return 0, false
	}
	return owner, true
}

// alive reports whether owner's session is still open.
func (s *Server) alive(owner engine.OwnerID) bool {
	_, ok := s.eng.SessionTTL(owner)
	return ok
}

// closeAllSessions closes every session, as Stop does.
func (s *Server) closeAllSessions() {
	for _, owner := range s.reg.drain() {
		s.eng.CloseSession(clock.Now(), owner)
	}
}

// allowed lists the body fields of each lock or semaphore op.
var allowed = [opCount]fields{
	opLockAcquire: fAcquireTimeout | fLeaseTTL,
	opLockRelease: fToken,
	opLockRenew:   fToken | fLeaseTTL,
	opLockEnqueue: fLeaseTTL,
	opLockWait:    fWaitTimeout,
	opSemAcquire:  fAcquireTimeout | fLeaseTTL | fLimit,
	opSemRelease:  fToken,
	opSemRenew:    fToken | fLeaseTTL,
	opSemEnqueue:  fLeaseTTL | fLimit,
	opSemWait:     fWaitTimeout,
}

// lockOp serves every /v1/locks and /v1/semaphores route. It validates
// the key and the body before it touches the session, so a bad request
// changes nothing.
func (s *Server) lockOp(ctx *fasthttp.RequestCtx, o op, rawKey []byte) {
	var keyBuf [maxKeyLen]byte
	key, ok := decodeKey(&keyBuf, rawKey)
	if !ok {
		writeError(ctx, errBadRequest, "bad key: must be 1-256 bytes after URL-decoding, with no space, tab, CR or LF")
		return
	}
	var body lockBody
	if err := decodeBody(ctx.PostBody(), &body); err != nil {
		writeError(ctx, errBadRequest, err.Error())
		return
	}
	if err := body.check(allowed[o]); err != nil {
		writeError(ctx, errBadRequest, err.Error())
		return
	}
	req := engine.AcquireReq{Key: key, Limit: 1}
	if body.Limit != nil {
		req.Limit = int(*body.Limit)
	}
	var err error
	if req.TTL, err = seconds(body.LeaseTTLS, "lease_ttl_s", true); err != nil {
		writeError(ctx, errBadRequest, err.Error())
		return
	}
	if req.TTL == 0 {
		req.TTL = s.cfg.DefaultTTL // 0 still: the engine's default
	}
	timeoutField, timeoutName := body.AcquireTimeoutS, "acquire_timeout_s"
	if allowed[o]&fWaitTimeout != 0 {
		timeoutField, timeoutName = body.WaitTimeoutS, "wait_timeout_s"
	}
	if req.Timeout, err = seconds(timeoutField, timeoutName, false); err != nil {
		writeError(ctx, errBadRequest, err.Error())
		return
	}
	var tok fence.Token
	if allowed[o]&fToken != 0 {
		if tok, ok = s.token(ctx, body.Token); !ok {
			return
		}
	}

	id := sessionHeader(ctx)
	if len(id) == 0 {
		writeError(ctx, errSessionRequired, "X-Latchd-Session header required")
		return
	}
	owner, ok := s.begin(ctx, id)
	if !ok {
		return
	}
	defer func() { s.eng.EndSession(clock.Now(), owner) }()
	req.Owner = owner

	switch o {
	case opLockAcquire, opSemAcquire:
		s.acquire(ctx, req)
	case opLockEnqueue, opSemEnqueue:
		s.enqueue(ctx, req)
	case opLockWait, opSemWait:
		s.wait(ctx, req)
	case opLockRelease, opSemRelease:
		if err := s.eng.Release(clock.Now(), key, tok); err != nil {
			e, msg := apiErrFor(err)
			writeError(ctx, e, msg)
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, bodyOK)
	case opLockRenew, opSemRenew:
		ttl, err := s.eng.Renew(clock.Now(), key, tok, req.TTL)
		if err != nil {
			e, msg := apiErrFor(err)
			writeError(ctx, e, msg)
			return
		}
		var buf [respBufLen]byte
		b := append(buf[:0], `{"status":"ok","remaining_s":`...)
		b = appendSeconds(b, ttl)
		b = append(b, '}')
		writeJSON(ctx, fasthttp.StatusOK, b)
	}
}

// token reads the token from the body or, for a release, the ?token=
// query parameter. Both may be given if they agree.
func (s *Server) token(ctx *fasthttp.RequestCtx, field *string) (fence.Token, bool) {
	var raw []byte
	if field != nil {
		raw = []byte(*field)
	}
	if q := ctx.QueryArgs().Peek("token"); len(q) > 0 {
		if raw != nil && string(raw) != string(q) {
			writeError(ctx, errBadRequest, "token in body and query differ")
			return fence.Token{}, false
		}
		raw = q
	}
	if len(raw) == 0 {
		writeError(ctx, errBadRequest, "token is required")
		return fence.Token{}, false
	}
	tok, err := fence.Parse(raw)
	if err != nil {
		writeError(ctx, errBadRequest, "token must be 32 lowercase hex characters")
		return fence.Token{}, false
	}
	return tok, true
}

func (s *Server) acquire(ctx *fasthttp.RequestCtx, req engine.AcquireReq) {
	req.Salt = clock.Salt()
	var sink chanSink
	if req.Timeout > 0 {
		sink = s.sinks.Get().(chanSink)
	}
	out, err := s.eng.Acquire(clock.Now(), req, sinkOrNil(sink))
	s.answer(ctx, req.Owner, out, err, sink)
}

func (s *Server) enqueue(ctx *fasthttp.RequestCtx, req engine.AcquireReq) {
	req.Salt = clock.Salt()
	out, err := s.eng.Enqueue(clock.Now(), req)
	if err == nil && !s.alive(req.Owner) {
		// Closed while we enqueued: its DropOwner may have run first.
		s.eng.DropOwner(clock.Now(), req.Owner)
		writeError(ctx, errSessionGone, "session deleted during the request")
		return
	}
	switch {
	case err != nil:
		e, msg := apiErrFor(err)
		writeError(ctx, e, msg)
	case out.Result == engine.Granted:
		writeGrant(ctx, "acquired", out.Token, out.TTL)
	default:
		writeJSON(ctx, fasthttp.StatusOK, bodyQueued)
	}
}

func (s *Server) wait(ctx *fasthttp.RequestCtx, req engine.AcquireReq) {
	var sink chanSink
	if req.Timeout > 0 {
		sink = s.sinks.Get().(chanSink)
	}
	out, err := s.eng.Wait(clock.Now(), req.Key, req.Owner, req.Timeout, sinkOrNil(sink))
	s.answer(ctx, req.Owner, out, err, sink)
}

// sinkOrNil keeps a nil chanSink from becoming a non-nil engine.Sink.
func sinkOrNil(c chanSink) engine.Sink {
	if c == nil {
		return nil
	}
	return c
}

// answer finishes an acquire or wait: it parks on sink when the engine
// queued the request, and checks the session survived the engine call.
// A session deleted meanwhile has its grant released and gets 410.
func (s *Server) answer(ctx *fasthttp.RequestCtx, owner engine.OwnerID, out engine.Outcome, err error, sink chanSink) {
	if err == nil && out.Result == engine.Queued {
		out = s.park(owner, sink)
	}
	if sink != nil && (err != nil || out.Result != engine.Queued) {
		s.sinks.Put(sink) // drained: the engine owes it nothing
	}
	if err != nil {
		e, msg := apiErrFor(err)
		writeError(ctx, e, msg)
		return
	}
	if out.Result == engine.Canceled || !s.alive(owner) {
		// A DELETE raced the request; its DropOwner may have run before
		// our grant, so drop again: what the session holds is released.
		s.eng.DropOwner(clock.Now(), owner)
		writeError(ctx, errSessionGone, "session deleted during the request")
		return
	}
	switch out.Result {
	case engine.Granted:
		writeGrant(ctx, "ok", out.Token, out.TTL)
	case engine.TimedOut:
		writeJSON(ctx, fasthttp.StatusConflict, bodyTimedOut)
	default:
		s.log.Error("unexpected engine result", zap.Stringer("result", out.Result))
		writeError(ctx, errInternal, "unexpected engine result")
	}
}

// park blocks until the engine delivers the parked request's outcome. If
// the session is closed first (by DELETE, or by Stop), the close's
// DropOwner delivers Canceled. Before blocking it checks the session is
// still open: a DELETE that ran before the request was queued would leave
// nobody to cancel it.
func (s *Server) park(owner engine.OwnerID, sink chanSink) engine.Outcome {
	if !s.alive(owner) {
		s.eng.DropOwner(clock.Now(), owner)
	}
	s.parked.Add(1)
	defer s.parked.Add(-1)
	select {
	case o := <-sink:
		return o
	case <-s.stopping:
		s.eng.CloseSession(clock.Now(), owner)
		// Either the close's DropOwner cancels us, or a grant won the
		// race and the close released it; one outcome comes either way.
		return <-sink
	}
}

// serveStats answers GET /v1/stats: the TCP stats JSON, with connections
// counting TCP connections plus open REST sessions.
func (s *Server) serveStats(ctx *fasthttp.RequestCtx) {
	now := clock.Now()
	st := s.eng.Snapshot(now)
	_, g := s.eng.Metrics()
	st.Connections = s.conns() + g.Sessions
	body, err := json.Marshal(st)
	if err != nil {
		writeError(ctx, errInternal, "cannot encode stats")
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, body)
}
