package server

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/clock"
)

// Every mutating request goes to the backend (backend.Backend) through
// Submit, one path for either kind. A single node answers at once, on the
// event loop: the answer is appended to the turn's output, or the
// connection parks on a Queued outcome until its Sink hears the grant or
// the timeout. A replicated leader takes the request and answers later:
// the connection parks (so later requests keep their order) and the
// session, as the request's backend.Later, hears the reply on the
// replica's goroutine that applied the entry (or, with one event loop, in
// a task on the loop: answers.go); the line is written like a grant
// (directly to an idle connection, else through its loop). A follower
// refuses at once: "error_not_leader <leader-client-addr>".
//
// What a connection did is undone when it closes, through the backend:
// once its last pending request has been answered, so the Disconnect can
// never overtake the Acquire it should undo. A follower cannot propose; a
// connection that closes on a node that lost leadership leaves its grants
// to their leases, and so does every connection when a server over a
// replicated backend stops: the next leader keeps their grants, which the
// clients renew there by token.

// ownerBase returns where a replicated node's connection IDs start: a
// random 31-bit prefix per process, so owners are unique across the
// cluster and across restarts (a new leader keeps the grants of an old
// one's connections, and a new connection must not inherit them). Bit 63
// stays clear: it marks REST sessions.
func ownerBase() uint64 { return (clock.Salt() & 0x7fff_ffff) << 32 }

// submit runs a mutating request. It returns the output and whether the
// connection must close after it is written. Event loop only.
func (s *Server) submit(ss *session, t int64, req *codec.Request, out []byte) ([]byte, bool) {
	// One Request per connection: Submit takes a pointer, and a local
	// would escape. Set field by field (a composite literal would be
	// built aside and copied); the session fields stay zero.
	if req.Cmd.Multi() {
		return s.submitSet(ss, t, req, out)
	}
	r := &ss.req
	r.Key, r.Owner, r.Client, r.Now, r.ReqID, r.Scope = req.Key, ss.id, ss.id, t, req.ReqID, 0
	if o := ss.sess.Load(); o != 0 {
		r.Owner, r.Scope = engine.OwnerID(o), engine.OwnerID(o)
	}
	parks, err := setOp(r, req)
	if err != nil {
		return codec.AppendStatus(out, codec.StatusError), err == errNotMutation
	}
	var sink engine.Sink
	if parks {
		sink = ss
	}
	// The reply comes to ss.Answer, which reads ss.cmd: the connection
	// parks until then. A request that can park on the key (sink set)
	// hears its reply through parkable instead: its grant may come
	// through the Sink first and let the connection go on to its next
	// request, which sets ss.cmd, before a queued reply arrives.
	ss.cmd = req.Cmd
	var later backend.Later = ss
	if sink != nil {
		later = (*parkable)(ss)
	}
	rep, pending, err := s.be.Submit(r, sink, ss.via(), later)
	r.Key, r.ReqID = nil, nil // views of the read buffer
	if pending {
		// Answer may have run already, on another goroutine: the
		// counters may pass through -1, which no reader acts on before
		// this turn ends (see session.Answer and close).
		ss.parked, ss.used = true, true
		ss.inflight.Add(1)
		s.inflight.Add(1)
		return out, false
	}
	if err == nil {
		ss.used = true
	} else {
		ss.noteRedirect(err)
	}
	out, ss.parked, _ = appendReply(out, req.Cmd, rep, err, false)
	return out, false
}

// errBadToken and errNotMutation are setOp's refusals: a request whose
// token does not parse, and one that is not a mutation at all.
var (
	errBadToken    = errors.New("server: bad token")
	errNotMutation = errors.New("server: not a mutation")
)

// setOp sets r's operation and arguments from req (Key, Owner and the
// rest are the caller's) and reports whether the request can park on its
// key: then its outcome may come later through a Sink.
func setOp(r *backend.Request, req *codec.Request) (parks bool, err error) {
	r.TTL, r.Timeout, r.Token, r.Limit, r.Mode = seconds(req.TTL), seconds(req.Timeout), fence.Token{}, 1, 0
	r.LockDelay = time.Duration(req.LockDelayMS) * time.Millisecond
	if req.Cmd.Semaphore() {
		r.Limit = int(req.Limit)
	} else if req.Cmd.RW() {
		r.Mode = rwMode(req.Cmd)
	}
	switch req.Cmd.Base() {
	case codec.CmdLock, codec.CmdSemLock:
		r.Op = backend.OpAcquire
		return true, nil
	case codec.CmdEnqueue, codec.CmdSemEnqueue:
		r.Op = backend.OpEnqueue
	case codec.CmdWait, codec.CmdSemWait:
		r.Op = backend.OpWait
		return true, nil
	case codec.CmdRelease, codec.CmdSemRelease, codec.CmdRenew, codec.CmdSemRenew:
		tok, err := fence.Parse(req.Token)
		if err != nil {
			return false, errBadToken
		}
		r.Op, r.Token = backend.OpRelease, tok
		if b := req.Cmd.Base(); b == codec.CmdRenew || b == codec.CmdSemRenew {
			r.Op = backend.OpRenew
		}
	default:
		return false, errNotMutation
	}
	return false, nil
}

// rwMode is the engine mode of a read-write command.
func rwMode(c codec.Cmd) engine.Mode {
	if c.Write() {
		return engine.ModeWrite
	}
	return engine.ModeRead
}

// appendReply appends the answer to a request of cmd that the backend
// answered with rep or err. It reports whether the connection parks (the
// outcome comes through its Sink) and whether it must close instead: an
// error other than the engine's or not_leader, for a request the backend
// had taken (taken), means its outcome is unknown, and answering either
// way could be a lie (and l has no bare error to give).
func appendReply(out []byte, cmd codec.Cmd, rep backend.Reply, err error, taken bool) (_ []byte, park, closeNow bool) {
	if err != nil {
		return appendErr(out, cmd, err, taken)
	}
	switch cmd.Base() {
	case codec.CmdLock, codec.CmdSemLock, codec.CmdWait, codec.CmdSemWait:
		if rep.Outcome.Result == engine.Queued {
			return out, true, false
		}
		return appendOutcome(out, codec.StatusOK, rep.Outcome), false, false
	case codec.CmdEnqueue, codec.CmdSemEnqueue:
		return appendOutcome(out, codec.StatusAcquired, rep.Outcome), false, false
	case codec.CmdRelease, codec.CmdSemRelease:
		return codec.AppendStatus(out, codec.StatusOK), false, false
	case codec.CmdRenew, codec.CmdSemRenew:
		return codec.AppendRemaining(out, int64(rep.Outcome.TTL/time.Second)), false, false
	case codec.CmdMultiLock, codec.CmdMultiSemLock:
		return appendSetReply(out, rep.Set)
	}
	return codec.AppendStatus(out, codec.StatusError), false, false
}

// appendErr is appendReply for an error.
func appendErr(out []byte, cmd codec.Cmd, err error, taken bool) (_ []byte, park, closeNow bool) {
	cmd = cmd.Base()
	st, engines := statusFor(err)
	switch {
	case !engines:
		if addr, ok := notLeader(err); ok {
			return appendNotLeader(out, addr), false, false
		}
		if taken {
			return out, false, true
		}
	case cmd == codec.CmdRelease || cmd == codec.CmdSemRelease ||
		cmd == codec.CmdRenew || cmd == codec.CmdSemRenew:
		st = codec.StatusError
	}
	return codec.AppendStatus(out, st), false, false
}

// notLeader returns the leader's client address when err is a
// *backend.NotLeaderError. Apart from appendErr so the engine's errors
// never move an error target to the heap.
func notLeader(err error) (string, bool) {
	var nl *backend.NotLeaderError
	if errors.As(err, &nl) {
		return nl.Leader.ClientAddr, true
	}
	return "", false
}

// Answer implements backend.Later: the reply to ss's pending request,
// handed back to the connection: written to the socket here when the
// connection is parked idle (the direct hand-off), else queued for its
// loop. It runs on the backend's goroutine that has the reply, or in the
// loop's answer task (answers.go), and never blocks.
func (ss *session) Answer(rep backend.Reply, err error) { ss.answer(ss.cmd, rep, err) }

// parkable is a session as the Later of a request that can park on its
// key (l, w and their semaphore forms, answered alike): its Answer does
// not read the session's cmd, which a later request may have set by then.
type parkable session

// Answer implements backend.Later.
func (p *parkable) Answer(rep backend.Reply, err error) {
	cmd := codec.CmdLock
	if rep.Set != nil {
		cmd = codec.CmdMultiLock
	}
	(*session)(p).answer(cmd, rep, err)
}

// answer hands the reply to a request of cmd back to the connection.
func (ss *session) answer(cmd codec.Cmd, rep backend.Reply, err error) {
	s := ss.srv
	defer s.inflight.Add(-1)
	defer s.answered1(ss) // before the count: it may submit a Disconnect
	if err != nil {
		ss.noteRedirect(err)
	}
	line, park, closeNow := appendReply(nil, cmd, rep, err, true)
	switch {
	case park:
		return // ss hears the grant or the timeout as a Sink
	case closeNow:
		s.debug("request outcome unknown", zap.Uint64("conn_id", uint64(ss.id)), zap.Error(err))
		_ = ss.conn.Close()
		return
	}
	if ss.directLine(line) {
		return
	}
	ss.mu.Lock()
	ss.inbox = append(ss.inbox, line...)
	ss.delivered = true
	ss.mu.Unlock()
	ss.wake()
}

// answered1 ends one pending request of ss; the last one of a closed
// connection submits its Disconnect.
func (s *Server) answered1(ss *session) {
	if ss.inflight.Add(-1) == 0 && ss.closed.Load() {
		s.disconnect(ss, nil)
	}
}

// disconnect submits ss's Disconnect, once: what the connection waits for
// is withdrawn and, with AutoRelease, what it holds released. via is the
// connection's loop when called on it, else nil.
func (s *Server) disconnect(ss *session, via engine.Via) {
	if !ss.disconnected.CompareAndSwap(false, true) {
		return
	}
	s.endTagSessions(ss)
	owner := ss.id
	if o := engine.OwnerID(ss.sess.Load()); o != 0 {
		if _, ok := s.be.Engine().SessionKey(o); ok {
			// A session's connection: what it holds and waits for is
			// kept for the orphan TTL, for a new connection to take back.
			s.be.EndSessionAsync(o)
			return
		}
		owner = o // the session ended under it: drop what is left now
	}
	release := s.cfg.AutoRelease
	if s.be.Replicated() && s.stopping() {
		// Shutting down: the clients move to the next leader and renew
		// their grants there by token; releasing them now would take
		// away locks their holders still rely on. Their waits go: no
		// one can resume a wait of this connection (w needs its owner),
		// and left queued each would be granted in turn and held unheard
		// for a lease.
		release = false
	}
	if s.be.Replicated() && ss.redirected.Load() {
		release = false // its client may hold its grants elsewhere (redirect.go)
	}
	s.inflight.Add(1)
	r := &ss.req
	*r = backend.Request{Op: backend.OpDisconnect, Owner: owner, Release: release}
	_, pending, err := s.be.Submit(r, nil, via, (*dropped)(ss))
	*r = backend.Request{}
	if !pending {
		s.inflight.Add(-1)
		if err != nil {
			s.debug("disconnect not applied", zap.Uint64("conn_id", uint64(ss.id)), zap.Error(err))
		}
	}
}

// dropped is a session whose Disconnect is pending: its Answer only logs.
type dropped session

// Answer implements backend.Later for the Disconnect.
func (d *dropped) Answer(_ backend.Reply, err error) {
	ss := (*session)(d)
	defer ss.srv.inflight.Add(-1)
	if err != nil {
		ss.srv.debug("disconnect not applied", zap.Uint64("conn_id", uint64(ss.id)), zap.Error(err))
	}
}

// stopping reports whether Stop has begun.
func (s *Server) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// appendNotLeader appends "error_not_leader <addr>", or the bare status
// while no leader is known.
func appendNotLeader(dst []byte, addr string) []byte {
	if addr == "" {
		return codec.AppendStatus(dst, codec.StatusErrorNotLeader)
	}
	return codec.AppendBody(dst, codec.StatusErrorNotLeader, []byte(addr))
}
