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

// reasons maps the errors behind protocol violations to their metric
// labels: the codec's error kinds and the server's own.
var reasons = [...]struct {
	err error
	r   metrics.Reason
}{
	{codec.ErrLineTooLong, metrics.ReasonLineTooLong},
	{codec.ErrUnknownCmd, metrics.ReasonUnknownCmd},
	{codec.ErrBadKey, metrics.ReasonBadKey},
	{codec.ErrBadArg, metrics.ReasonBadArg},
	{codec.ErrBadInt, metrics.ReasonBadInt},
	{codec.ErrNegative, metrics.ReasonNegative},
	{codec.ErrNonPositive, metrics.ReasonNonPositive},
	{codec.ErrEmptyToken, metrics.ReasonEmptyToken},
	{codec.ErrArgCount, metrics.ReasonArgCount},
	{errNotAuthed, metrics.ReasonAuth},
	{errBadAuth, metrics.ReasonAuth},
	{errAuthLimited, metrics.ReasonAuthLimited},
	{errParkedOverflow, metrics.ReasonParkedOverflow},
	{errOutboundOverflow, metrics.ReasonOutboundCap},
	{errOutputBudget, metrics.ReasonOutputBudget},
	{errWriteTimeout, metrics.ReasonWriteTimeout},
}

// reasonFor returns the metric label of the error behind a protocol
// violation.
func reasonFor(err error) metrics.Reason {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.r
		}
	}
	return metrics.ReasonOther
}
