package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latchd/codec"
)

// numCmds bounds the arrays indexed by codec.Cmd.
const numCmds = int(codec.CmdLast) + 1

// Reason is why the TCP server closed a connection for a protocol
// violation. The set is fixed: each value is one label value of
// latchd_tcp_protocol_errors_total.
type Reason uint8

// The protocol error reasons: the codec's request and framing errors, then
// the server's own.
const (
	ReasonLineTooLong    Reason = iota // codec.ErrLineTooLong (framing)
	ReasonUnknownCmd                   // codec.ErrUnknownCmd
	ReasonBadKey                       // codec.ErrBadKey
	ReasonBadArg                       // codec.ErrBadArg
	ReasonBadInt                       // codec.ErrBadInt
	ReasonNegative                     // codec.ErrNegative
	ReasonNonPositive                  // codec.ErrNonPositive
	ReasonEmptyToken                   // codec.ErrEmptyToken
	ReasonArgCount                     // codec.ErrArgCount
	ReasonReadTimeout                  // a partial request sat past ReadTimeout
	ReasonAuth                         // a request before auth, or a wrong token
	ReasonParkedOverflow               // too many bytes behind a waiting request
	ReasonAuthLimited                  // auth from an IP past its failed-auth limit
	ReasonOutboundCap                  // unsent answers past the per-connection cap
	ReasonOutputBudget                 // closed to bring all unsent output under budget
	ReasonWriteTimeout                 // answers unsent past the write timeout
	ReasonOther                        // anything else
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonLineTooLong:    "line_too_long",
	ReasonUnknownCmd:     "unknown_cmd",
	ReasonBadKey:         "bad_key",
	ReasonBadArg:         "bad_arg",
	ReasonBadInt:         "bad_int",
	ReasonNegative:       "negative",
	ReasonNonPositive:    "non_positive",
	ReasonEmptyToken:     "empty_token",
	ReasonArgCount:       "arg_count",
	ReasonReadTimeout:    "read_timeout",
	ReasonAuth:           "auth",
	ReasonParkedOverflow: "parked_overflow",
	ReasonAuthLimited:    "auth_rate_limited",
	ReasonOutboundCap:    "outbound_overflow",
	ReasonOutputBudget:   "output_budget",
	ReasonWriteTimeout:   "write_timeout",
	ReasonOther:          "other",
}

// Refusal is why the TCP server refused a connection.
type Refusal uint8

// The refusal reasons, label values of latchd_tcp_connections_refused_total.
const (
	RefusedMaxConnections      Refusal = iota // MaxConnections reached
	RefusedMaxConnectionsPerIP                // MaxConnectionsPerIP reached
	numRefusals
)

var refusalNames = [numRefusals]string{
	RefusedMaxConnections:      "max_connections",
	RefusedMaxConnectionsPerIP: "max_connections_per_ip",
}

// TCP holds the TCP server's metrics, every child resolved at
// construction into arrays, so recording is an array index and an atomic
// add. A nil *TCP is not valid.
type TCP struct {
	conns          atomic.Int64
	requests       [numCmds]prometheus.Counter
	latency        [numCmds]prometheus.Observer
	protocolErrors [numReasons]prometheus.Counter
	refused        [numRefusals]prometheus.Counter
}

func newTCP(reg prometheus.Registerer) *TCP {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchd_tcp_requests_total",
		Help: "Valid TCP requests decoded, by wire command.",
	}, []string{"cmd"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "latchd_tcp_request_duration_seconds",
		Help: "Time from a TCP request being decoded to its answer being queued for writing, by wire command; " +
			"a blocking request that waited counts until its grant or timeout is taken.",
		Buckets: Buckets,
	}, []string{"cmd"})
	protocolErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchd_tcp_protocol_errors_total",
		Help: "TCP connections closed for a protocol violation, by reason.",
	}, []string{"reason"})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchd_tcp_connections_refused_total",
		Help: "TCP connections refused by a connection cap, by reason.",
	}, []string{"reason"})
	reg.MustRegister(requests, latency, protocolErrors, refused)

	m := &TCP{}
	for c := codec.CmdInvalid + 1; int(c) < numCmds; c++ {
		m.requests[c] = requests.WithLabelValues(c.String())
		m.latency[c] = latency.WithLabelValues(c.String())
	}
	for r := range numReasons {
		m.protocolErrors[r] = protocolErrors.WithLabelValues(reasonNames[r])
	}
	for r := range numRefusals {
		m.refused[r] = refused.WithLabelValues(refusalNames[r])
	}
	return m
}

// valid reports whether c has resolved children.
func valid(c codec.Cmd) bool { return c != codec.CmdInvalid && int(c) < numCmds }

// Request counts one valid request of command c.
func (m *TCP) Request(c codec.Cmd) {
	if valid(c) {
		m.requests[c].Inc()
	}
}

// Answered records that a request of command c was answered ns
// nanoseconds after it was decoded.
func (m *TCP) Answered(c codec.Cmd, ns int64) {
	if valid(c) {
		m.latency[c].Observe(float64(ns) / 1e9)
	}
}

// ProtocolError counts one connection closed for reason r.
func (m *TCP) ProtocolError(r Reason) {
	if r >= numReasons {
		r = ReasonOther
	}
	m.protocolErrors[r].Inc()
}

// Refused counts one connection refused for reason r.
func (m *TCP) Refused(r Refusal) {
	if r < numRefusals {
		m.refused[r].Inc()
	}
}

// Opened and Closed track the open connections that latchd_tcp_connections
// reports. The server calls each once per admitted connection.
func (m *TCP) Opened() { m.conns.Add(1) }

// Closed is Opened's counterpart.
func (m *TCP) Closed() { m.conns.Add(-1) }
