package httpfast

import (
	"cmp"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/authlimit"
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
	if err := decodeBody(ctx.PostBody(), &struct{}{}, true); err != nil {
		writeError(ctx, errBadRequest, err.Error())
		return
	}
	ip, _ := netip.AddrFromSlice(ctx.RemoteIP())
	id, owner, err := s.reg.create(s.be, s.cfg.SessionTTL, s.cfg.MaxSessions, authlimit.Key(ip), s.cfg.MaxSessionsPerIP)
	switch {
	case errors.Is(err, errMaxSessionsPerIP):
		writeError(ctx, errMaxSessions, "this address holds its maximum number of sessions")
		return
	case errors.Is(err, engine.ErrMaxSessions):
		if ce := s.log.Check(zap.DebugLevel, "session refused"); ce != nil {
			ce.Write(zap.Int("max_sessions", s.cfg.MaxSessions))
		}
		e, msg := apiErrFor(err)
		writeError(ctx, e, msg)
		return
	case err != nil:
		if !failBackend(ctx, err) {
			s.log.Error("open session", zap.Error(err))
			writeError(ctx, errInternal, "cannot open session")
		}
		return
	}
	if ce := s.log.Check(zap.DebugLevel, "session opened"); ce != nil {
		ce.Write(zap.Uint64("owner", uint64(owner)))
	}
	writeSeconds(ctx, fasthttp.StatusCreated, `{"session_id":"`+id+`","ttl_s":`, s.cfg.SessionTTL)
}

// deleteSession answers DELETE /v1/sessions/{id}: it releases everything
// the session held and cancels its parked requests, as a disconnect does.
// The name is forgotten once the close is done (or found done): a close
// that failed in cluster mode can be retried.
func (s *Server) deleteSession(ctx *fasthttp.RequestCtx, id []byte) {
	owner, ok := s.reg.lookup(s.be.Engine(), id)
	if !ok {
		writeError(ctx, errSessionGone, "no such session (expired or deleted)")
		return
	}
	closed, err := s.closeSession(owner)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.reg.remove(string(id))
	if !closed {
		writeError(ctx, errSessionGone, "no such session (expired or deleted)")
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, bodyOK)
}

// keepalive answers POST /v1/sessions/{id}/keepalive.
func (s *Server) keepalive(ctx *fasthttp.RequestCtx, id []byte) {
	if err := decodeBody(ctx.PostBody(), &struct{}{}, true); err != nil {
		writeError(ctx, errBadRequest, err.Error())
		return
	}
	owner, ok := s.begin(ctx, id)
	if !ok {
		return
	}
	s.endSession(owner)
	ttl, ok := s.be.Engine().SessionTTL(owner) // a session just begun has a TTL
	if !ok {
		// Closed by a DELETE or Stop between the begin and now.
		writeError(ctx, errSessionGone, "session deleted during the request")
		return
	}
	writeSeconds(ctx, fasthttp.StatusOK, `{"status":"ok","ttl_s":`, ttl)
}

// beginHeader is begin for the session the request's header names
// (X-Latchd-Session, or dflockd's X-Dflockd-Session).
func (s *Server) beginHeader(ctx *fasthttp.RequestCtx) (engine.OwnerID, bool) {
	id := ctx.Request.Header.Peek("X-Latchd-Session")
	if len(id) == 0 {
		id = ctx.Request.Header.Peek("X-Dflockd-Session")
	}
	if len(id) == 0 {
		writeError(ctx, errSessionRequired, "X-Latchd-Session header required")
		return 0, false
	}
	return s.begin(ctx, id)
}

// begin resolves a session id to its owner and marks a request of it in
// flight (the caller must EndSession). It answers session_gone itself and
// forgets the name when the engine has dropped the session.
func (s *Server) begin(ctx *fasthttp.RequestCtx, id []byte) (engine.OwnerID, bool) {
	owner, ok := s.reg.lookup(s.be.Engine(), id)
	if !ok {
		writeError(ctx, errSessionGone, "no such session (expired or deleted)")
		return 0, false
	}
	begun, err := s.beginSession(owner)
	if err != nil {
		s.fail(ctx, err)
		return 0, false
	}
	if !begun {
		s.reg.remove(string(id))
		writeError(ctx, errSessionGone, "session expired or deleted")
		return 0, false
	}
	return owner, true
}

// alive reports whether owner's session is still open.
func (s *Server) alive(owner engine.OwnerID) bool {
	_, ok := s.be.Engine().SessionTTL(owner)
	return ok
}

// closeAllSessions closes every session, as Stop does. Over a replicated
// backend it only forgets their names: the sessions and what they hold
// stay in the replicated state for the next leader, as TCP grants do.
func (s *Server) closeAllSessions() {
	owners := s.reg.drain()
	if s.be.Replicated() {
		return
	}
	for _, owner := range owners {
		_, _ = s.closeSession(owner) // a single node's close does not fail
	}
}

// allowed lists the body fields of each lock or semaphore op.
var allowed = [opCount]fields{
	opLockAcquire: fAcquireTimeout | fLeaseTTL | fLockDelay,
	opLockRelease: fToken,
	opLockRenew:   fToken | fLeaseTTL,
	opLockEnqueue: fLeaseTTL | fLockDelay,
	opLockWait:    fWaitTimeout,
	opSemAcquire:  fAcquireTimeout | fLeaseTTL | fLimit | fLockDelay,
	opSemRelease:  fToken,
	opSemRenew:    fToken | fLeaseTTL,
	opSemEnqueue:  fLeaseTTL | fLimit | fLockDelay,
	opSemWait:     fWaitTimeout,
	opRWAcquire:   fAcquireTimeout | fLeaseTTL | fLockDelay,
	opRWRelease:   fToken,
	opRWRenew:     fToken | fLeaseTTL,
	opRWEnqueue:   fLeaseTTL | fLockDelay,
	opRWWait:      fWaitTimeout,
}

// lockOp serves every /v1/locks, /v1/semaphores and /v1/rwlocks route. It validates
// the key and the body before it touches the session, so a bad request
// changes nothing.
func (s *Server) lockOp(ctx *fasthttp.RequestCtx, o op, rawKey []byte) {
	// The key goes to the backend behind an interface, where escape
	// analysis loses it: a pooled buffer keeps it off the heap. Neither
	// backend keeps it after returning.
	keyBuf := keyBufs.Get().(*[maxKeyLen]byte)
	defer keyBufs.Put(keyBuf)
	key, ok := decodeKey(keyBuf, rawKey)
	if !ok {
		writeError(ctx, errBadRequest, "bad key: must be 1-256 bytes after URL-decoding, with no space, tab, CR or LF")
		return
	}
	req := engine.AcquireReq{Key: key, Limit: 1}
	tok, err := s.readLockBody(ctx, o, &req)
	if err == nil && (o == opRWAcquire || o == opRWEnqueue) {
		req.Mode, err = rwModeOf(ctx)
	}
	if err != nil {
		writeError(ctx, errBadRequest, err.Error())
		return
	}

	idem := ctx.Request.Header.Peek(idempotencyHeader)
	if len(idem) > 0 && !validIdempotencyKey(idem) {
		writeError(ctx, errBadRequest, "bad Idempotency-Key: must be 1-64 printable ASCII characters without space")
		return
	}
	owner, ok := s.beginHeader(ctx)
	if !ok {
		return
	}
	defer s.endSession(owner)
	req.Owner = owner
	s.lockCall(ctx, o, req, tok, scopedRequestID(owner, idem))
}

// readLockBody reads the JSON body of op o into req (limit, lease, timeout)
// and returns the token for the routes that take one. Fields o does not
// allow are an error, whose text is the 400's message.
func (s *Server) readLockBody(ctx *fasthttp.RequestCtx, o op, req *engine.AcquireReq) (fence.Token, error) {
	var body lockBody
	if err := decodeBody(ctx.PostBody(), &body, true); err != nil {
		return fence.Token{}, err
	}
	if err := body.check(allowed[o]); err != nil {
		return fence.Token{}, err
	}
	if body.Limit != nil {
		req.Limit = int(*body.Limit)
	}
	var err error
	if req.TTL, err = seconds(body.LeaseTTLS, "lease_ttl_s", true); err != nil {
		return fence.Token{}, err
	}
	req.TTL = cmp.Or(req.TTL, s.cfg.DefaultTTL) // 0 still: the engine's default
	if req.LockDelay, err = lockDelay(body.LockDelayS); err != nil {
		return fence.Token{}, err
	}
	timeoutField, timeoutName := body.AcquireTimeoutS, "acquire_timeout_s"
	if allowed[o]&fWaitTimeout != 0 {
		timeoutField, timeoutName = body.WaitTimeoutS, "wait_timeout_s"
	}
	if req.Timeout, err = seconds(timeoutField, timeoutName, false); err != nil {
		return fence.Token{}, err
	}
	if allowed[o]&fToken == 0 {
		return fence.Token{}, nil
	}
	return token(ctx, body.Token)
}

// lockCall makes the backend call of op o for the session's owner
// (req.Owner) and writes its answer.
func (s *Server) lockCall(ctx *fasthttp.RequestCtx, o op, req engine.AcquireReq, tok fence.Token, rid []byte) {
	switch o {
	case opLockAcquire, opSemAcquire, opRWAcquire:
		s.blocking(ctx, backend.Request{Op: backend.OpAcquire, Key: req.Key, Owner: req.Owner, Limit: req.Limit,
			Mode: req.Mode, TTL: req.TTL, Timeout: req.Timeout, ReqID: rid, LockDelay: req.LockDelay})
	case opLockEnqueue, opSemEnqueue, opRWEnqueue:
		s.enqueue(ctx, req, rid)
	case opLockWait, opSemWait, opRWWait:
		s.blocking(ctx, backend.Request{Op: backend.OpWait, Key: req.Key, Owner: req.Owner, Timeout: req.Timeout, ReqID: rid})
	case opLockRelease, opSemRelease, opRWRelease:
		if err := s.releaseID(req.Key, tok, rid); err != nil {
			s.fail(ctx, err)
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, bodyOK)
	case opLockRenew, opSemRenew, opRWRenew:
		rep, err := s.be.Do(backend.Request{Op: backend.OpRenew, Key: req.Key, Token: tok, TTL: req.TTL, Owner: req.Owner,
			ReqID: rid}, nil)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		writeSeconds(ctx, fasthttp.StatusOK, `{"status":"ok","remaining_s":`, rep.Outcome.TTL)
	}
}

// token reads the token from the body or, for a release, the ?token=
// query parameter. Both may be given if they agree.
func token(ctx *fasthttp.RequestCtx, field *string) (fence.Token, error) {
	var raw []byte
	if field != nil {
		raw = []byte(*field)
	}
	if q := ctx.QueryArgs().Peek("token"); len(q) > 0 {
		if raw != nil && string(raw) != string(q) {
			return fence.Token{}, bodyErr("token in body and query differ")
		}
		raw = q
	}
	if len(raw) == 0 {
		return fence.Token{}, bodyErr("token is required")
	}
	tok, err := fence.Parse(raw)
	if err != nil {
		return fence.Token{}, bodyErr("token must be 32 lowercase hex characters")
	}
	return tok, nil
}

// blocking makes an acquire or wait call r, parked on a sink when it has
// a timeout, and answers it.
func (s *Server) blocking(ctx *fasthttp.RequestCtx, r backend.Request) {
	var sink chanSink
	if r.Timeout > 0 {
		sink = s.sinks.Get().(chanSink)
	}
	rep, err := s.be.Do(r, sinkOrNil(sink))
	s.answer(ctx, r.Key, r.Owner, r.Timeout, rep.Outcome, err, sink)
}

func (s *Server) enqueue(ctx *fasthttp.RequestCtx, req engine.AcquireReq, rid []byte) {
	rep, err := s.be.Do(backend.Request{Op: backend.OpEnqueue, Key: req.Key, Owner: req.Owner, Limit: req.Limit,
		Mode: req.Mode, TTL: req.TTL, ReqID: rid, LockDelay: req.LockDelay}, nil)
	if err == nil && !s.alive(req.Owner) {
		// Closed while we enqueued: its DropOwner may have run first.
		_ = s.disconnect(req.Owner, true)
		writeError(ctx, errSessionGone, "session deleted during the request")
		return
	}
	switch {
	case err != nil:
		s.fail(ctx, err)
	case rep.Outcome.Result == engine.Granted:
		writeGrant(ctx, "acquired", rep.Outcome.Token, rep.Outcome.TTL)
	default:
		writeJSON(ctx, fasthttp.StatusOK, bodyQueued)
	}
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
func (s *Server) answer(ctx *fasthttp.RequestCtx, key []byte, owner engine.OwnerID, timeout time.Duration, out engine.Outcome, err error, sink chanSink) {
	how := parkedHeard
	if err == nil && out.Result == engine.Queued {
		out, how = s.park(ctx, key, owner, sink, timeout)
	}
	// The sink goes back to the pool once nothing can deliver into it. A
	// failed call's sink may still be registered on a replicated backend,
	// so it is dropped.
	if sink != nil && how == parkedHeard && out.Result != engine.Queued && err == nil {
		s.sinks.Put(sink)
	}
	if err != nil {
		s.fail(ctx, err)
		return
	}
	if how == parkedLost {
		writeError(ctx, errUnknownOutcome, msgUnknownOutcome)
		return
	}
	if how == parkedGone {
		// Nobody reads this; the request left the queue (see gone.go).
		ctx.SetConnectionClose()
		writeError(ctx, errClientGone, "the client closed its connection: the request was withdrawn")
		return
	}
	if !s.alive(owner) {
		// A DELETE raced the request (a Canceled is its DropOwner's); its
		// DropOwner may have run before our grant, so drop again: what the
		// session holds is released.
		_ = s.disconnect(owner, true)
		writeError(ctx, errSessionGone, "session deleted during the request")
		return
	}
	switch out.Result {
	case engine.Granted:
		writeGrant(ctx, "ok", out.Token, out.TTL)
	case engine.TimedOut:
		writeJSON(ctx, fasthttp.StatusConflict, bodyTimedOut)
	case engine.Drained: // the server began a graceful stop
		writeError(ctx, errShuttingDown, msgShuttingDown)
	case engine.Canceled: // the session still open: withdrawn or restored
		if how == parkedWithdrawn {
			writeError(ctx, errUnavailable, "the server is stopping: the request was withdrawn; retry on the leader")
			return
		}
		// A snapshot restore on this node dropped the sinks of its parked
		// requests; the request may still be queued and granted unheard.
		writeError(ctx, errUnknownOutcome, msgUnknownOutcome)
	default:
		s.log.Error("unexpected engine result", zap.Stringer("result", out.Result))
		writeError(ctx, errInternal, "unexpected engine result")
	}
}

// parked says how a park ended.
type parked uint8

const (
	parkedHeard     parked = iota // the sink heard the request's outcome
	parkedWithdrawn               // Stop: withdrawn (or the session closed), then heard
	parkedLost                    // gave up on the sink; the outcome is unknown
	parkedGone                    // the client closed its connection: withdrawn, a racing grant released
)

// parkGrace is how long past its own timeout a parked request waits for
// its outcome. A single node always delivers by the timeout; a replicated
// one hears it through the log, and a failover delays it by the election.
const parkGrace = 10 * time.Second

// withdrawWait bounds how long a request withdrawn at Stop waits for its
// Canceled.
const withdrawWait = 2 * time.Second

// park blocks until the parked request's outcome arrives: a grant, a
// timeout, or Canceled when the session is closed. It first checks the
// session is open (a DELETE that ran before the request was queued would
// leave nobody to cancel it), and gives up after the timeout and
// parkGrace. A client that leaves meanwhile (gone.go) has its request
// withdrawn and a racing grant released.
func (s *Server) park(ctx *fasthttp.RequestCtx, key []byte, owner engine.OwnerID, sink chanSink, timeout time.Duration) (engine.Outcome, parked) {
	if !s.alive(owner) {
		_ = s.disconnect(owner, true)
	}
	s.parked.Add(1)
	defer s.parked.Add(-1)
	w := s.watch.watch(ctx.Conn())
	defer s.watch.unwatch(w)
	t := time.NewTimer(timeout + parkGrace)
	defer t.Stop()
	select {
	case o := <-sink:
		if s.grantUnheard(w, key, owner, o) {
			return engine.Outcome{}, parkedGone
		}
		return o, parkedHeard
	case <-t.C:
		return engine.Outcome{}, parkedLost
	case <-w.goneCh():
		if err := s.cancelWait(key, owner); err != nil {
			if ce := s.log.Check(zap.DebugLevel, "withdrawal of an abandoned request failed"); ce != nil {
				ce.Write(zap.Uint64("owner", uint64(owner)), zap.Error(err))
			}
		}
		// Either the withdrawal cancels us, or the request was answered
		// first; one outcome comes either way.
		select {
		case o := <-sink:
			s.abandoned(key, owner, o)
		case <-t.C: // never heard: the timeout or a grant's lease ends it
		}
		return engine.Outcome{}, parkedGone
	case <-s.stopping:
	}
	return s.withdraw(owner, sink)
}

// withdraw ends a parked request at Stop: a single node closes the
// session (its DropOwner cancels the request or releases a racing grant);
// a replicated backend keeps it and withdraws only its waits. Either way
// the sink hears one outcome, barring a snapshot restore.
func (s *Server) withdraw(owner engine.OwnerID, sink chanSink) (engine.Outcome, parked) {
	var err error
	if s.be.Replicated() {
		err = s.disconnect(owner, false)
	} else {
		_, err = s.closeSession(owner)
	}
	if err != nil {
		select {
		case o := <-sink: // heard meanwhile
			return o, parkedHeard
		default:
			return engine.Outcome{}, parkedLost
		}
	}
	select {
	case o := <-sink:
		return o, parkedWithdrawn
	case <-time.After(withdrawWait):
		return engine.Outcome{}, parkedLost
	}
}

// grantUnheard checks, when a parked request hears a grant, whether its
// client left after the last look (the watch looks every goneEvery): if so
// it releases the grant, which nobody would hear of, and reports true.
func (s *Server) grantUnheard(w *watched, key []byte, owner engine.OwnerID, o engine.Outcome) bool {
	if w == nil || o.Result != engine.Granted || !peerGone(w.rc) {
		return false
	}
	s.abandoned(key, owner, o)
	return true
}

// abandoned finishes a parked request whose client went away, given its
// outcome: a grant nobody will hear of is released at once, so the next
// waiter gets the slot now rather than when the lease or session expires.
func (s *Server) abandoned(key []byte, owner engine.OwnerID, o engine.Outcome) {
	if ce := s.log.Check(zap.DebugLevel, "client left a parked request"); ce != nil {
		ce.Write(zap.Uint64("owner", uint64(owner)), zap.Stringer("outcome", o.Result))
	}
	if o.Result == engine.Granted {
		if err := s.release(key, o.Token); err != nil {
			if ce := s.log.Check(zap.DebugLevel, "release of an abandoned grant failed"); ce != nil {
				ce.Write(zap.Uint64("owner", uint64(owner)), zap.Error(err))
			}
		}
	}
}

// keyBufs holds the buffers lock routes decode keys into.
var keyBufs = sync.Pool{New: func() any { return new([maxKeyLen]byte) }}
