package httpfast

import (
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/latchd/latchd/internal/metrics"
)

// statusCodes are the response codes counted one by one; any other
// counts as "other".
var statusCodes = [...]int{200, 201, 400, 401, 404, 405, 409, 410, 413, 429, 500, 503}

// httpMetrics are the REST server's own metrics, in a Set of its own (not
// the package-global default set): a latency histogram per route and a
// response counter per status code, all created up front so the hot path
// only updates them.
type httpMetrics struct {
	set      *vm.Set
	latency  [opCount]*vm.Histogram
	statuses [len(statusCodes) + 1]*vm.Counter
}

func newHTTPMetrics() *httpMetrics {
	m := &httpMetrics{set: vm.NewSet()}
	for o := range opCount {
		m.latency[o] = m.set.NewHistogram(`latchd_http_request_duration_seconds{route="` + opNames[o] + `"}`)
	}
	for i, code := range statusCodes {
		m.statuses[i] = m.set.NewCounter(`latchd_http_responses_total{code="` + itoa(code) + `"}`)
	}
	m.statuses[len(statusCodes)] = m.set.NewCounter(`latchd_http_responses_total{code="other"}`)
	return m
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// observe records one request: its latency under its route, its status.
func (m *httpMetrics) observe(o op, status int, start time.Time) {
	m.latency[o].UpdateDuration(start)
	i := len(statusCodes)
	for j, c := range statusCodes {
		if c == status {
			i = j
			break
		}
	}
	m.statuses[i].Inc()
}

// serveMetrics answers GET /metrics in the Prometheus text format: the
// engine's counters and gauges, then the HTTP histograms and counters.
// The histograms use VictoriaMetrics' vmrange buckets.
func (s *Server) serveMetrics(ctx *fasthttp.RequestCtx) {
	c, g := s.eng.Metrics()
	sample := metrics.Sample{Counters: c, Gauges: g, TCPConnections: s.conns(), LastFence: s.eng.LastFence()}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentTypeBytes(contentText)
	ctx.SetBody(metrics.AppendEngine(nil, &sample))
	s.met.set.WritePrometheus(ctx)
}
