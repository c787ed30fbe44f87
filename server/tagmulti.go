package server

import (
	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// Many keys at once in tagged mode: "#<tag> ml[ <session-id>]" (and msl)
// with the plain form's key and argument lines (multi.go). The set waits
// on its own: its tagSetWait hears the outcome and answers it with the
// request's tag, and the connection goes on decoding. Any number of sets
// may wait on one tagged connection at once.

// tagSetWait is one tagged ml or msl: the SetSink of its queued outcome,
// the Later of a replicated backend's reply, and the outcome a single node
// writes at once. One per request, never reused: a replicated backend may
// deliver the grant before it answers the submit.
type tagSetWait struct {
	ss    *session
	tag   tagBuf
	owner engine.OwnerID
	key   uint64 // keyHash of its first key (tagcancel.go)
	out   engine.SetOutcome
}

// submitTagSet runs a tagged ml or msl for owner. Event loop only.
func (s *Server) submitTagSet(ss *session, t int64, tr *codec.Tagged, owner engine.OwnerID, out []byte) []byte {
	if ss.multi == nil {
		ss.multi = &multiState{}
	}
	m := ss.multi
	req := &tr.Request
	n, ok := codec.SplitKeys(req.Key, m.keys[:])
	if !ok {
		return codec.AppendStatus(codec.AppendTag(out, tr.Tag), codec.StatusError)
	}
	limit := 1
	if req.Cmd == codec.CmdMultiSemLock {
		limit = int(req.Limit)
	}
	w := &tagSetWait{ss: ss, owner: owner, key: keyHash(m.keys[0])}
	w.tag.set(tr.Tag)
	r := &ss.req
	*r = backend.Request{Op: backend.OpAcquireSet, Keys: m.keys[:n], Owner: owner, Client: ss.id, Now: t,
		Limit: limit, TTL: seconds(req.TTL), Timeout: seconds(req.Timeout), SetSink: w, SetOut: &w.out,
		ReqID: req.ReqID}
	if tr.Session != nil || ss.sess.Load() != 0 {
		r.Scope = owner // a session's: its ids are its own, as a single key's
	}
	rep, pending, err := s.be.Submit(r, nil, ss.via(), w)
	*r = backend.Request{}
	clear(m.keys[:n]) // views of the read buffer
	out, _ = ss.tagSubmitted(out, tr.Tag, req.Cmd, rep, pending, err)
	return out
}

// DeliverSet implements engine.SetSink: the queued set's outcome, with its
// tag, to the connection's inbox. Any goroutine; never blocks.
func (w *tagSetWait) DeliverSet(o *engine.SetOutcome) {
	ss := w.ss
	if o.Result == engine.Canceled {
		ss.tagCanceled(w.owner, w.key, true, w.tag)
		return
	}
	if ss.closed.Load() {
		return // a session's grant, kept for it: nobody to tell
	}
	ss.mu.Lock()
	ss.inbox = appendSetOutcome(codec.AppendTag(ss.inbox, w.tag.bytes()), o)
	ss.mu.Unlock()
	ss.wake()
}

// Answer implements backend.Later: a replicated backend's reply.
func (w *tagSetWait) Answer(rep backend.Reply, err error) {
	w.ss.tagAnswer(w.tag, codec.CmdMultiLock, rep, err)
}
