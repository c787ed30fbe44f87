package httpfast

import (
	"cmp"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// POST /v1/multi takes many keys at once, all or none (engine.AcquireSet):
// {"keys": [...], "limit": n, "acquire_timeout_s": t, "lease_ttl_s": l}.
// A grant answers {"status":"ok","tokens":[...],"lease_ttl_s":l}, one
// token per key in the request's order; each key is then renewed and
// released on its own route (/v1/locks/{key}, or /v1/semaphores/{key}
// with a limit) with its own token. An Idempotency-Key makes a retry
// answer as the first attempt did, as on the single-key routes: the same
// tokens, or, for a set still waiting, its place in the queues.

// multiBody is the JSON body of POST /v1/multi.
type multiBody struct {
	Keys            []string `json:"keys"`
	Limit           *int64   `json:"limit"`
	AcquireTimeoutS *float64 `json:"acquire_timeout_s"`
	LeaseTTLS       *float64 `json:"lease_ttl_s"`
}

// setChan is a parked set's SetSink.
type setChan chan engine.SetOutcome

func (c setChan) DeliverSet(o *engine.SetOutcome) { c <- *o }

// multiOp serves POST /v1/multi.
func (s *Server) multiOp(ctx *fasthttp.RequestCtx) {
	r, err := s.readMultiBody(ctx)
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
	r.Owner, r.ReqID = owner, scopedRequestID(owner, idem)
	var sink setChan
	if r.Timeout > 0 {
		sink = make(setChan, 1)
		r.SetSink = sink
	}
	rep, err := s.be.Do(r, nil)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	out := rep.Set
	if out == nil {
		writeError(ctx, errInternal, "no outcome")
		return
	}
	if out.Result == engine.Queued {
		*out = s.parkSet(owner, r.Keys[0], sink, r.Timeout)
	}
	if !s.alive(owner) {
		_ = s.disconnect(owner, true) // as answer: a DELETE raced the request
		writeError(ctx, errSessionGone, "session deleted during the request")
		return
	}
	writeSetOutcome(ctx, out)
}

// readMultiBody checks the body of POST /v1/multi.
func (s *Server) readMultiBody(ctx *fasthttp.RequestCtx) (backend.Request, error) {
	var body multiBody
	if err := decodeBody(ctx.PostBody(), &body, true); err != nil {
		return backend.Request{}, err
	}
	if len(body.Keys) == 0 || len(body.Keys) > codec.MaxKeys {
		return backend.Request{}, bodyErr("keys must name 1 to 16 keys")
	}
	r := backend.Request{Op: backend.OpAcquireSet, Limit: 1, Keys: make([][]byte, len(body.Keys))}
	for i, k := range body.Keys {
		if !codec.ValidKey([]byte(k)) || len(k) > maxKeyLen {
			return r, bodyErr("bad key: must be 1-256 bytes, with no space, tab, CR or LF")
		}
		for _, o := range body.Keys[:i] {
			if o == k {
				return r, bodyErr("keys must be distinct")
			}
		}
		r.Keys[i] = []byte(k)
	}
	if body.Limit != nil {
		if *body.Limit < 1 || *body.Limit > codec.MaxLimit {
			return r, bodyErr("limit must be in [1, 1000000000]")
		}
		r.Limit = int(*body.Limit)
	}
	var err error
	if r.TTL, err = seconds(body.LeaseTTLS, "lease_ttl_s", true); err != nil {
		return r, err
	}
	r.TTL = cmp.Or(r.TTL, s.cfg.DefaultTTL)
	r.Timeout, err = seconds(body.AcquireTimeoutS, "acquire_timeout_s", false)
	return r, err
}

// parkSet waits for a queued set's outcome, as park does a single key's:
// until it comes, the timeout and parkGrace pass (unknown), or the
// server stops (the set is withdrawn).
func (s *Server) parkSet(owner engine.OwnerID, first []byte, sink setChan, timeout time.Duration) engine.SetOutcome {
	s.parked.Add(1)
	defer s.parked.Add(-1)
	t := time.NewTimer(timeout + parkGrace)
	defer t.Stop()
	select {
	case o := <-sink:
		return o
	case <-t.C:
		return engine.SetOutcome{}
	case <-s.stopping:
	}
	_, _ = s.be.Do(backend.Request{Op: backend.OpCancelSet, Key: first, Owner: owner}, nil)
	select {
	case o := <-sink:
		if o.Result == engine.Canceled {
			o.Result = engine.Drained
		}
		return o
	case <-time.After(withdrawWait):
		return engine.SetOutcome{}
	}
}

// writeSetOutcome answers a set's outcome.
func writeSetOutcome(ctx *fasthttp.RequestCtx, o *engine.SetOutcome) {
	switch o.Result {
	case engine.Granted:
		b := make([]byte, 0, 64+40*o.N)
		b = append(b, `{"status":"ok","tokens":[`...)
		for i, tok := range o.Tokens[:o.N] {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = tok.AppendHex(b)
			b = append(b, '"')
		}
		b = append(b, `],"lease_ttl_s":`...)
		b = appendSeconds(b, o.TTL)
		writeJSON(ctx, fasthttp.StatusOK, append(b, '}'))
	case engine.TimedOut:
		writeJSON(ctx, fasthttp.StatusConflict, bodyTimedOut)
	case engine.Drained:
		writeError(ctx, errShuttingDown, msgShuttingDown)
	default: // never heard, or canceled by a restore: the set may be held
		writeError(ctx, errUnknownOutcome, msgUnknownOutcome)
	}
}
