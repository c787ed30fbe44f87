package server

import (
	"sync"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// Tagged mode (codec/tagged.go). A connection that greets with "tagged"
// stops answering in request order: every request carries a tag, and its
// answer goes out with that tag as soon as it is ready. A blocking request
// parks only itself: its own Sink (a tagWait, or for ml and msl a
// tagSetWait, tagmulti.go) hears the grant, and the connection goes on
// decoding. A request names the owner it acts for: a
// session attached to the connection (tagsession.go), or, naming none, the
// connection (or the session it acts for, as a plain connection would).

// tagState is a session's tagged-mode state.
type tagState struct {
	on       bool   // event loop only: the connection greeted
	statsTag tagBuf // event loop only: the tag of the stats request parked
	// Under session.mu: the sessions attached to the connection.
	attached []tagSess
}

// tagSess is a session attached to a tagged connection.
type tagSess struct {
	owner engine.OwnerID
	key   uint64
}

// tagBuf holds a copy of a tag.
type tagBuf struct {
	b [codec.MaxTag]byte
	n uint8
}

func (t *tagBuf) set(b []byte)  { t.n = uint8(copy(t.b[:], b)) }
func (t *tagBuf) bytes() []byte { return t.b[:t.n] }

// tagWait is one tagged request the backend may answer later: the Sink of
// its grant and the Later of its reply. A single node's are pooled: the
// engine delivers each exactly once, and a request answered at once hands
// its tagWait back at once. A replicated backend may deliver the grant
// before it answers the submit, so its tagWaits are never reused.
type tagWait struct {
	ss     *session
	tag    tagBuf
	cmd    codec.Cmd
	owner  engine.OwnerID
	key    uint64 // keyHash of its key, when it parks (tagcancel.go)
	pooled bool
}

var tagWaits = sync.Pool{New: func() any { return new(tagWait) }}

func newTagWait(ss *session, tag []byte, cmd codec.Cmd, owner engine.OwnerID, pooled bool) *tagWait {
	var w *tagWait
	if pooled {
		w = tagWaits.Get().(*tagWait)
	} else {
		w = new(tagWait)
	}
	w.ss, w.cmd, w.owner, w.key, w.pooled = ss, cmd, owner, 0, pooled
	w.tag.set(tag)
	return w
}

func (w *tagWait) free() {
	if w.pooled {
		w.ss = nil
		tagWaits.Put(w)
	}
}

// Deliver implements engine.Sink: the outcome of the parked request, with
// its tag, to the connection's inbox. Any goroutine; never blocks.
func (w *tagWait) Deliver(o engine.Outcome) {
	ss := w.ss
	if o.Result == engine.Canceled {
		w.canceled()
		return
	}
	if ss.closed.Load() {
		w.free() // a session's grant, kept for it: nobody to tell
		return
	}
	w.enqueue(o)
	ss.wake()
}

// canceled answers a request the engine withdrew, and frees w.
func (w *tagWait) canceled() {
	ss, owner, key, tag := w.ss, w.owner, w.key, w.tag
	w.free()
	ss.tagCanceled(owner, key, false, tag)
}

// tagCanceled answers a tagged request of owner on key (keyHash; a set's
// first) that the engine withdrew. A request of a session that ended
// (closed, here or from another connection) fails alone: "#<tag> error".
// One a cancel request withdrew (its mark says so) ended without a
// grant: "#<tag> timeout". Otherwise, as for a plain connection
// (session.Deliver), it is the connection's own Disconnect, or an outcome
// a restore made unknown, which closing the connection says.
func (ss *session) tagCanceled(owner engine.OwnerID, key uint64, set bool, tag tagBuf) {
	if ss.closed.Load() {
		return
	}
	if owner != ss.id && owner != engine.OwnerID(ss.sess.Load()) {
		if _, ok := ss.srv.be.Engine().SessionKey(owner); !ok {
			ss.tagStatus(tag, codec.StatusError)
			return
		}
	}
	if ss.srv.cancels.take(owner, key, set) {
		ss.tagStatus(tag, codec.StatusTimeout)
		return
	}
	_ = ss.conn.Close()
}

// tagStatus queues the answer "#<tag> <st>" and wakes the loop.
func (ss *session) tagStatus(tag tagBuf, st codec.Status) {
	ss.mu.Lock()
	ss.inbox = codec.AppendStatus(codec.AppendTag(ss.inbox, tag.bytes()), st)
	ss.mu.Unlock()
	ss.wake()
}

// enqueue appends the tagged outcome to the inbox and frees w.
func (w *tagWait) enqueue(o engine.Outcome) {
	ss := w.ss
	ss.mu.Lock()
	ss.inbox = appendOutcome(codec.AppendTag(ss.inbox, w.tag.bytes()), codec.StatusOK, o)
	ss.mu.Unlock()
	w.free()
}

// Answer implements backend.Later: a replicated backend's reply.
func (w *tagWait) Answer(rep backend.Reply, err error) { w.ss.tagAnswer(w.tag, w.cmd, rep, err) }

// tagAnswer answers a tagged request with a replicated backend's reply,
// unless it parked (its sink hears the grant or the timeout).
func (ss *session) tagAnswer(tag tagBuf, cmd codec.Cmd, rep backend.Reply, err error) {
	s := ss.srv
	defer s.inflight.Add(-1)
	defer s.answered1(ss)
	if err != nil {
		ss.noteRedirect(err)
	}
	line, park, closeNow := appendReply(codec.AppendTag(nil, tag.bytes()), cmd, rep, err, true)
	switch {
	case park:
		return
	case closeNow:
		_ = ss.conn.Close() // the outcome is unknown (submit.go)
		return
	}
	ss.tagLine(line)
}

// tagLine queues a formatted answer line and wakes the loop.
func (ss *session) tagLine(line []byte) {
	if ss.closed.Load() {
		return
	}
	ss.mu.Lock()
	ss.inbox = append(ss.inbox, line...)
	ss.mu.Unlock()
	ss.wake()
}

// tagTurn decodes and runs the tagged requests in buf until the bytes run
// out or a stats request parks the connection. Event loop only.
func (s *Server) tagTurn(ss *session, buf, out []byte) (used int, _ []byte, closeNow bool) {
	t := int64(0)
	for !ss.parked && used < len(buf) {
		var tr codec.Tagged
		n, err := codec.DecodeTagged(buf[used:], &tr)
		if n == 0 && err == nil {
			break
		}
		if tr.Tag == nil {
			// A framing error, or no tag to answer with: the stream is
			// lost. The answers ready go before the last line.
			s.protocolError(ss, err)
			out = ss.takeDelivered(out)
			return used + n, codec.AppendStatus(out, codec.StatusError), true
		}
		used += n
		if err != nil {
			// A well-framed request that is not valid: only it fails.
			out = codec.AppendStatus(codec.AppendTag(out, tr.Tag), codec.StatusError)
			continue
		}
		if t == 0 {
			t = now()
		}
		if s.met != nil {
			s.met.Request(tr.Cmd)
		}
		out = s.tagDispatch(ss, t, &tr, out)
	}
	return used, out, false
}

// tagDispatch runs one valid tagged request.
func (s *Server) tagDispatch(ss *session, t int64, tr *codec.Tagged, out []byte) []byte {
	switch tr.Cmd {
	case codec.CmdSession:
		return s.tagSession(ss, tr, out)
	case codec.CmdStats:
		// Parks the connection as in plain mode: stats is rare, and
		// answers already granted keep flowing.
		ss.parked, ss.statsWait = true, true
		ss.tg.statsTag.set(tr.Tag)
		go s.stats(ss, string(tr.Key) == consistentKey)
		return out
	case codec.CmdAuth, codec.CmdTagged:
		return codec.AppendStatus(codec.AppendTag(out, tr.Tag), codec.StatusError)
	}
	owner, ok := ss.tagOwner(tr.Session)
	if !ok {
		return codec.AppendStatus(codec.AppendTag(out, tr.Tag), codec.StatusError)
	}
	if tr.Cmd.Multi() {
		return s.submitTagSet(ss, t, tr, owner, out)
	}
	if tr.Cmd == codec.CmdCancel {
		return s.tagCancel(ss, t, tr, owner, out)
	}
	return s.submitTagged(ss, t, tr, owner, out)
}

// submitTagged runs a tagged mutating request for owner.
func (s *Server) submitTagged(ss *session, t int64, tr *codec.Tagged, owner engine.OwnerID, out []byte) []byte {
	req := &tr.Request
	r := &ss.req
	r.Key, r.Owner, r.Client, r.Now, r.ReqID, r.Scope = req.Key, owner, ss.id, t, req.ReqID, 0
	if tr.Session != nil || ss.sess.Load() != 0 {
		r.Scope = owner // a session's: its ids are its own (backend.ScopeReqID)
	}
	parks, err := setOp(r, req)
	if err != nil {
		r.Key, r.ReqID = nil, nil
		return codec.AppendStatus(codec.AppendTag(out, tr.Tag), codec.StatusError)
	}
	replicated := s.be.Replicated()
	var w *tagWait
	var sink engine.Sink
	var later backend.Later
	if parks || replicated {
		w = newTagWait(ss, tr.Tag, req.Cmd, owner, !replicated)
		later = w
		if parks {
			sink, w.key = w, keyHash(req.Key)
		}
	}
	rep, pending, err := s.be.Submit(r, sink, ss.via(), later)
	r.Key, r.ReqID = nil, nil // views of the read buffer
	out, waits := ss.tagSubmitted(out, tr.Tag, req.Cmd, rep, pending, err)
	if !waits && w != nil {
		w.free()
	}
	return out
}

// tagSubmitted answers a tagged request Submit took, unless the answer is
// to come later (waits: from the backend or the request's sink).
func (ss *session) tagSubmitted(out, tag []byte, cmd codec.Cmd, rep backend.Reply, pending bool, err error) (_ []byte, waits bool) {
	if pending {
		ss.used = true
		ss.inflight.Add(1)
		ss.srv.inflight.Add(1)
		return out, true
	}
	if err == nil {
		ss.used = true
	} else {
		ss.noteRedirect(err)
	}
	mark := len(out)
	out, park, _ := appendReply(codec.AppendTag(out, tag), cmd, rep, err, false)
	if park {
		return out[:mark], true // queued: the sink answers
	}
	return out, false
}

// takeStatsTagged is takeStats with the parked stats request's tag before
// the answer in tagged mode.
func (s *Server) takeStatsTagged(ss *session, out []byte) []byte {
	if !ss.tg.on || !ss.statsWait || ss.parked {
		return s.takeStats(ss, out)
	}
	mark := len(out)
	out = s.takeStats(ss, codec.AppendTag(out, ss.tg.statsTag.bytes()))
	if ss.statsWait {
		return out[:mark] // not taken
	}
	return out
}

// greet switches the connection to tagged mode.
func (s *Server) greet(ss *session, out []byte) []byte {
	ss.tg.on = true
	return codec.AppendStatus(out, codec.StatusOK)
}
