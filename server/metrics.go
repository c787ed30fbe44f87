package server

import (
	"errors"
	"net"

	"go.uber.org/zap"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/internal/listen"
	"github.com/latchd/latchd/internal/metrics"
)

// Option adjusts a Server at construction.
type Option func(*Server)

// WithMetrics records the server's metrics in m (from
// metrics.Registry.TCP): per-command counts and latencies, protocol errors
// and refusals by reason, open connections. Without it, or with nil,
// nothing is recorded.
func WithMetrics(m *metrics.TCP) Option {
	return func(s *Server) { s.met = m }
}

// WithListeners guards the TCP listener in set: an accept error is
// counted, logged and backed off instead of ending the listener, and the
// set reports the listener down while it backs off. Without it the
// listener is still guarded, outside any set.
func WithListeners(set *listen.Set) Option {
	return func(s *Server) { s.lnSet = set }
}

// answered records the latency of a request of command c decoded at start
// whose answer is now queued, and returns the time it took as the start of
// the next request in the batch. A request that parked is recorded later,
// by unparked. Call only with s.met set.
func (s *Server) answered(ss *session, c codec.Cmd, start int64) int64 {
	if ss.parked {
		ss.parkedAt, ss.parkedCmd = start, c
		return start
	}
	end := now()
	s.met.Answered(c, end-start)
	return end
}

// unparked records the latency of a parked request whose grant or timeout
// was just taken, and forgets it. ss.parkedAt is set (non-zero) only when
// s.met is, by answered.
func (s *Server) unparked(ss *session) {
	s.met.Answered(ss.parkedCmd, now()-ss.parkedAt)
	ss.parkedAt = 0
}

// violation counts a connection closed for a protocol violation.
func (s *Server) violation(r metrics.Reason) {
	s.violations.Add(1)
	if s.met != nil {
		s.met.ProtocolError(r)
	}
}

// refuse refuses a connection open counted, by the connection cap r.
func (s *Server) refuse(remote net.Addr, r metrics.Refusal, why string) (*session, bool) {
	s.conns.Add(-1)
	s.refused.Add(1)
	if s.met != nil {
		s.met.Refused(r)
	}
	s.debug("connection refused", zap.String("remote", remote.String()), zap.String("reason", why))
	return nil, false
}

// reasonFor maps the error behind a protocol violation to its metric
// label: the codec's error kinds and the server's own.
func reasonFor(err error) metrics.Reason {
	switch {
	case errors.Is(err, codec.ErrLineTooLong):
		return metrics.ReasonLineTooLong
	case errors.Is(err, codec.ErrUnknownCmd):
		return metrics.ReasonUnknownCmd
	case errors.Is(err, codec.ErrBadKey):
		return metrics.ReasonBadKey
	case errors.Is(err, codec.ErrBadArg):
		return metrics.ReasonBadArg
	case errors.Is(err, codec.ErrBadInt):
		return metrics.ReasonBadInt
	case errors.Is(err, codec.ErrNegative):
		return metrics.ReasonNegative
	case errors.Is(err, codec.ErrNonPositive):
		return metrics.ReasonNonPositive
	case errors.Is(err, codec.ErrEmptyToken):
		return metrics.ReasonEmptyToken
	case errors.Is(err, codec.ErrArgCount):
		return metrics.ReasonArgCount
	case errors.Is(err, errNotAuthed), errors.Is(err, errBadAuth):
		return metrics.ReasonAuth
	case errors.Is(err, errAuthLimited):
		return metrics.ReasonAuthLimited
	case errors.Is(err, errParkedOverflow):
		return metrics.ReasonParkedOverflow
	case errors.Is(err, errOutboundOverflow):
		return metrics.ReasonOutboundCap
	case errors.Is(err, errOutputBudget):
		return metrics.ReasonOutputBudget
	case errors.Is(err, errWriteTimeout):
		return metrics.ReasonWriteTimeout
	}
	return metrics.ReasonOther
}
