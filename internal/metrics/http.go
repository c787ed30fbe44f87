package metrics

import "github.com/prometheus/client_golang/prometheus"

// HTTP holds the REST server's metric families; its owner resolves the
// children it needs at construction (Route, Code).
type HTTP struct {
	latency   *prometheus.HistogramVec
	responses *prometheus.CounterVec
}

func newHTTP(reg prometheus.Registerer) *HTTP {
	h := &HTTP{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "latchd_http_request_duration_seconds",
			Help:    "Time to handle a REST request, by route; a blocking request includes its wait.",
			Buckets: Buckets,
		}, []string{"route"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchd_http_responses_total",
			Help: "REST responses, by status code.",
		}, []string{"code"}),
	}
	reg.MustRegister(h.latency, h.responses)
	return h
}

// Route returns the latency histogram of one route. route must come from
// a fixed set of route names, never from a request; call it at
// construction, not per request.
func (h *HTTP) Route(route string) prometheus.Observer { return h.latency.WithLabelValues(route) }

// Code returns the response counter of one status code label ("200",
// "other"). Call it at construction, not per request.
func (h *HTTP) Code(code string) prometheus.Counter { return h.responses.WithLabelValues(code) }
