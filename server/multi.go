package server

import (
	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// Many keys at once: ml and msl name their keys on line 2, separated by
// spaces, and are answered "ok <token1> ... <tokenN> <ttl>" (one token
// per key, in the request's order), "timeout" or an error, like l. The
// keys are then released and renewed one by one with r/n (sr/sn), each
// with its own token.

// multiState is a connection's buffers for ml and msl, made at its first:
// the key views of the request being submitted, the outcome a single node
// writes, and the line a later grant is formatted into (one set request
// is parked at a time, so one line is enough).
type multiState struct {
	keys [codec.MaxKeys][]byte
	out  engine.SetOutcome
	line []byte
}

// submitSet runs an ml or msl request, as submit does a single key's.
func (s *Server) submitSet(ss *session, t int64, req *codec.Request, out []byte) ([]byte, bool) {
	if ss.multi == nil {
		ss.multi = &multiState{}
	}
	m := ss.multi
	n, ok := codec.SplitKeys(req.Key, m.keys[:])
	if !ok {
		return codec.AppendStatus(out, codec.StatusError), false
	}
	limit := 1
	if req.Cmd == codec.CmdMultiSemLock {
		limit = int(req.Limit)
	}
	r := &ss.req
	*r = backend.Request{Op: backend.OpAcquireSet, Keys: m.keys[:n], Owner: ss.id, Client: ss.id, Now: t,
		Limit: limit, TTL: seconds(req.TTL), Timeout: seconds(req.Timeout), SetSink: ss, SetOut: &m.out,
		ReqID: req.ReqID}
	if o := engine.OwnerID(ss.sess.Load()); o != 0 {
		r.Owner, r.Scope = o, o // the session's, as a single key's (submit)
	}
	ss.cmd = req.Cmd
	rep, pending, err := s.be.Submit(r, nil, ss.via(), (*parkable)(ss))
	*r = backend.Request{}
	clear(m.keys[:n]) // views of the read buffer
	if pending {
		ss.parked, ss.used = true, true
		ss.inflight.Add(1)
		s.inflight.Add(1)
		return out, false
	}
	if err == nil {
		ss.used = true
	}
	out, ss.parked, _ = appendReply(out, req.Cmd, rep, err, false)
	return out, false
}

// appendSetReply appends the answer to an ml or msl: it reports park when
// the set was queued (its SetSink hears the outcome).
func appendSetReply(out []byte, o *engine.SetOutcome) (_ []byte, park, closeNow bool) {
	if o == nil {
		return codec.AppendStatus(out, codec.StatusError), false, false
	}
	if o.Result == engine.Queued {
		return out, true, false
	}
	return appendSetOutcome(out, o), false, false
}

// appendSetOutcome appends the line for a set's final outcome.
func appendSetOutcome(dst []byte, o *engine.SetOutcome) []byte {
	switch o.Result {
	case engine.Granted:
		dst = append(dst, "ok"...)
		for _, tok := range o.Tokens[:o.N] {
			dst = append(dst, ' ')
			dst = tok.AppendHex(dst)
		}
		dst = append(dst, ' ')
		dst = appendInt(dst, int64(o.TTL/1e9))
		return append(dst, '\n')
	case engine.TimedOut:
		return codec.AppendStatus(dst, codec.StatusTimeout)
	case engine.Drained:
		return codec.AppendStatus(dst, codec.StatusError)
	}
	return dst
}

func appendInt(dst []byte, v int64) []byte {
	var b [20]byte
	i := len(b)
	if v == 0 {
		return append(dst, '0')
	}
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, b[i:]...)
}

// DeliverSet implements engine.SetSink: the outcome of a queued ml or
// msl, as Deliver is a single key's.
func (ss *session) DeliverSet(o *engine.SetOutcome) {
	if o.Result == engine.Canceled {
		if !ss.closed.Load() {
			_ = ss.conn.Close() // as Deliver: the outcome is unknown
		}
		return
	}
	m := ss.multi
	m.line = appendSetOutcome(m.line[:0], o)
	if ss.directLine(m.line) {
		return
	}
	ss.mu.Lock()
	ss.inbox = append(ss.inbox, m.line...)
	ss.delivered = true
	ss.mu.Unlock()
	ss.wake()
}
