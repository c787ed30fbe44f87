package httpfast

import (
	"bytes"
	"net"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/budget"
	"github.com/latchd/latchd/internal/clock"
)

// serveStats answers GET /v1/stats: the TCP stats JSON, with connections
// counting TCP connections plus open REST sessions, and in cluster mode
// the node's raft state under "cluster". It is bounded as for TCP
// (StatsConcurrency, MaxStatsBytes, the output budget until written).
func (s *Server) serveStats(ctx *fasthttp.RequestCtx) {
	if !s.buildSlot(ctx) {
		return
	}
	defer func() { <-s.statsSem }()
	limit := s.cfg.MaxStatsBytes
	if !s.budget.Fits(int64(limit)) {
		limit = 1 // totals only
	}
	eng := s.be.Engine()
	st := eng.SnapshotMax(clock.Now(), limit)
	_, g := eng.Metrics()
	st.Connections = s.conns() + g.Sessions
	body, err := engine.EncodeStats(st, limit, s.be.ClusterStatus())
	if err != nil {
		writeError(ctx, errInternal, "cannot encode stats")
		return
	}
	s.writeCounted(ctx, typeJSON, body)
}

// writeCounted answers 200 with body of type ctype, counted in the
// output budget until fasthttp has written it or dropped the connection.
func (s *Server) writeCounted(ctx *fasthttp.RequestCtx, ctype string, body []byte) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentType(ctype)
	s.budget.Add(int64(len(body)))
	cb := &countedBody{n: int64(len(body)), budget: s.budget}
	cb.Reset(body)
	ctx.Response.SetBodyStream(cb, len(body))
}

// writeStatic answers 200 with a body shared by every request (the
// OpenAPI document, the dashboard's files): streamed from the one copy,
// so a client that does not read holds fasthttp's write buffer, not a
// copy of the body.
func writeStatic(ctx *fasthttp.RequestCtx, body []byte) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.SetBodyStream(bytes.NewReader(body), len(body))
}

// countedBody is a response body counted in the output budget until
// fasthttp closes it: after writing it, or when the connection failed or
// the request was reset.
type countedBody struct {
	bytes.Reader
	n      int64
	budget *budget.Budget
	closed atomic.Bool
}

// Close gives the body's bytes back to the budget, once.
func (cb *countedBody) Close() error {
	if cb.closed.CompareAndSwap(false, true) {
		cb.budget.Add(-cb.n)
		cb.Reset(nil)
	}
	return nil
}

// sendBufferListener sets SO_SNDBUF on each accepted connection.
type sendBufferListener struct {
	*net.TCPListener
	size int
}

func (l sendBufferListener) Accept() (net.Conn, error) {
	c, err := l.AcceptTCP()
	if err != nil {
		return nil, err
	}
	_ = c.SetWriteBuffer(l.size) // best effort: the kernel may round it
	return c, nil
}

// buildSlot takes one of the StatsConcurrency slots a large answer (stats,
// /metrics, the dashboard's lists) is built in; the caller gives it back.
// Once the server stops it answers 503 shutting_down and reports false
// instead of waiting its turn: Stop waits for every connection's request
// in flight, and a stopping server would otherwise build, two at a time,
// the answers pipelined by clients that may be long gone.
func (s *Server) buildSlot(ctx *fasthttp.RequestCtx) bool {
	select {
	case s.statsSem <- struct{}{}:
		return true
	case <-s.stopping:
		writeError(ctx, errShuttingDown, "the server is stopping: the answer was not built")
		return false
	}
}
