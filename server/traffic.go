package server

import (
	"crypto/subtle"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/internal/clock"
)

func now() int64 { return clock.Now() }

// OnTraffic writes answers the engine delivered, then decodes and runs the
// buffered requests in order until one parks or the bytes run out.
func (s *Server) OnTraffic(c gnet.Conn) gnet.Action {
	ss := c.Context().(*session)
	action := s.turn(c, ss)
	s.drain(ss.loop) // waiters on this loop that this turn granted
	return action
}

// turn runs one gnet connection's turn: process what it has buffered and
// write the answers.
func (s *Server) turn(c gnet.Conn, ss *session) gnet.Action {
	if !ss.own() {
		return gnet.None // a direct hand-off is writing; it wakes us after
	}
	buf, _ := c.Peek(-1)
	used, out, closeNow := s.process(ss, buf)
	if used > 0 {
		_, _ = c.Discard(used) // never Discard(0): it empties the whole buffer
	}
	if len(out) > 0 {
		write(c, out)
	}
	ss.out = keep(out)
	if closeNow {
		return gnet.Close
	}
	if err := s.settle(ss, len(out), c.OutboundBuffered()); err != nil {
		// A client that sends but never reads would make the server
		// buffer without bound (output.go).
		s.protocolError(ss, err)
		return gnet.Close
	}
	ss.park(c, used == len(buf))
	return gnet.None
}

// process is one turn of a connection, the same for every transport: it
// takes the answers the engine delivered, then decodes and runs the
// requests in buf in order until one parks or the bytes run out. It
// returns how many bytes of buf it consumed, the output to write (built in
// ss.out) and whether to close the connection after writing it.
func (s *Server) process(ss *session, buf []byte) (used int, out []byte, closeNow bool) {
	ended := ss.watchEnded.Load()      // before the take: its error line is in the inbox then
	out = ss.takeDelivered(ss.out[:0]) // answers to older requests go first
	if ended {
		return 0, out, true
	}
	out = s.takeStatsTagged(ss, out)
	if ss.parkedAt != 0 && !ss.parked {
		s.unparked(ss) // the parked request's answer was just taken
	}
	t, mark := int64(0), int64(0) // mark: when the current request was taken up
	for !ss.parked && used < len(buf) {
		if ss.tg.on {
			n, o, closeNow := s.tagTurn(ss, buf[used:], out)
			// Grants this turn's releases made on this loop go in
			// the same write.
			used, out = used+n, ss.takeDelivered(o)
			if closeNow {
				return used, out, true
			}
			break
		}
		var req codec.Request
		n, err := codec.Decode(buf[used:], &req)
		if n == 0 && err == nil {
			break // incomplete request: wait for more bytes
		}
		if err != nil {
			s.protocolError(ss, err)
			return used + n, codec.AppendStatus(out, codec.StatusError), true
		}
		used += n
		if t == 0 {
			t = now()
			mark = t
		}
		if s.met != nil {
			s.met.Request(req.Cmd)
		}
		out, closeNow = s.dispatch(ss, t, &req, out)
		if s.met != nil {
			mark = s.answered(ss, req.Cmd, mark)
		}
		if closeNow {
			return used, out, true
		}
	}
	rest := len(buf) - used
	switch {
	case ss.parked && rest > s.cfg.MaxParked:
		s.protocolError(ss, errParkedOverflow)
		return used, out, true
	case rest > 0 && !ss.parked:
		// Progress counts as activity: only a connection that completes
		// no request for ReadTimeout is idle.
		if used > 0 || ss.partialSince.Load() == 0 {
			ss.partialSince.Store(now())
		}
	default:
		ss.partialSince.Store(0)
	}
	return used, out, false
}

// dispatch runs one valid request. It returns the output and whether the
// connection must close after it is written.
func (s *Server) dispatch(ss *session, t int64, req *codec.Request, out []byte) ([]byte, bool) {
	if req.Cmd == codec.CmdAuth {
		return s.auth(ss, req, out)
	}
	if !ss.authed {
		s.protocolError(ss, errNotAuthed)
		return codec.AppendStatus(out, codec.StatusErrorAuth), true
	}
	if req.Cmd == codec.CmdSession {
		return s.sessionCmd(ss, req, out)
	}
	if req.Cmd == codec.CmdTagged {
		return s.greet(ss, out), false
	}
	if req.Cmd == codec.CmdWatch {
		return s.watch(ss, req, out)
	}
	if req.Cmd == codec.CmdStats {
		// With many keys the snapshot and its JSON take tens of
		// milliseconds: build them off the loop, so the other connections
		// on it are not stalled. The connection parks meanwhile, so
		// answers keep request order.
		ss.parked, ss.statsWait = true, true
		go s.stats(ss, string(req.Key) == consistentKey)
		return out, false
	}
	return s.submit(ss, t, req, out)
}

// auth checks the shared secret in constant time. Without a configured
// token, auth is an error but not a violation.
func (s *Server) auth(ss *session, req *codec.Request, out []byte) ([]byte, bool) {
	if s.cfg.AuthToken == "" {
		return codec.AppendStatus(out, codec.StatusError), false
	}
	t := time.Now()
	if s.authLim != nil {
		// An IP that failed too often is refused without a comparison,
		// so guessing costs it time.
		if blocked, _ := s.authLim.Blocked(ss.authIP, t); blocked {
			s.protocolError(ss, errAuthLimited)
			return codec.AppendStatus(out, codec.StatusErrorAuth), true
		}
	}
	if subtle.ConstantTimeCompare(req.Token, []byte(s.cfg.AuthToken)) != 1 {
		if s.authLim != nil {
			s.authLim.Failed(ss.authIP, t)
		}
		s.protocolError(ss, errBadAuth)
		return codec.AppendStatus(out, codec.StatusErrorAuth), true
	}
	ss.authed = true
	return codec.AppendStatus(out, codec.StatusOK), false
}

func (s *Server) protocolError(ss *session, err error) {
	s.violation(reasonFor(err))
	s.debug("protocol error", zap.Uint64("conn_id", uint64(ss.id)), zap.String("reason", err.Error()))
}

func seconds(n int64) time.Duration { return time.Duration(n) * time.Second }
