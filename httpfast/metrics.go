package httpfast

import (
	"bytes"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/latchd/latchd/internal/metrics"
)

// statusCodes are the response codes counted one by one; any other
// counts as "other".
var statusCodes = [...]int{200, 201, 400, 401, 404, 405, 409, 410, 413, 429, 499, 500, 503}

// httpMetrics are the REST server's metrics in the shared registry, every
// child resolved up front: a latency histogram per route, a counter per
// status code.
type httpMetrics struct {
	reg      *metrics.Registry
	latency  [opCount]prometheus.Observer
	statuses [len(statusCodes) + 1]prometheus.Counter
}

func newHTTPMetrics(reg *metrics.Registry) *httpMetrics {
	m := &httpMetrics{reg: reg}
	h := reg.HTTP()
	for o := range opCount {
		m.latency[o] = h.Route(opNames[o])
	}
	for i, code := range statusCodes {
		m.statuses[i] = h.Code(strconv.Itoa(code))
	}
	m.statuses[len(statusCodes)] = h.Code("other")
	return m
}

// observe records one request: its latency under its route, its status.
func (m *httpMetrics) observe(o op, status int, start time.Time) {
	m.latency[o].Observe(time.Since(start).Seconds())
	i := slices.Index(statusCodes[:], status)
	if i < 0 {
		i = len(statusCodes) // "other"
	}
	m.statuses[i].Inc()
}

// serveMetrics answers GET /metrics with the whole registry in the
// Prometheus text format. Bounded like stats, but past the output budget
// it answers 503 unavailable.
func (s *Server) serveMetrics(ctx *fasthttp.RequestCtx) {
	if !s.buildSlot(ctx) {
		return
	}
	defer func() { <-s.statsSem }()
	var buf bytes.Buffer
	if _, err := s.met.reg.WriteTo(&buf); err != nil {
		// A collector failed; what was gathered is still served.
		if ce := s.log.Check(zap.DebugLevel, "metrics scrape"); ce != nil {
			ce.Write(zap.Error(err))
		}
	}
	if !s.budget.Fits(int64(buf.Len())) {
		retryAfter(ctx, time.Second)
		writeError(ctx, errUnavailable, "output budget spent: too many answers unread; retry")
		return
	}
	s.writeCounted(ctx, metrics.ContentType, buf.Bytes())
}
