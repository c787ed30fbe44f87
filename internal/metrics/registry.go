package metrics

import (
	"errors"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/buildinfo"
)

// Buckets are the upper bounds, in seconds, of every latency histogram:
// from 10µs (an uncontended request answered on the event loop) to 30s
// (a lock wait), roughly 1-2.5-5 per decade.
var Buckets = []float64{
	0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
}

// ContentType is the media type WriteTo produces: the Prometheus text
// exposition format 0.0.4.
var ContentType = string(expfmt.NewFormat(expfmt.TypeTextPlain))

// Registry is one process's metrics (see the package comment). Build it
// with NewRegistry and share it between the transports.
type Registry struct {
	reg  *prometheus.Registry
	tcp  *TCP
	http *HTTP
}

// NewRegistry returns a registry reporting eng's counters and gauges on
// each scrape. eng may be nil (the engine families then report 0).
func NewRegistry(eng *engine.Engine) *Registry {
	return NewRegistryFunc(func() *engine.Engine { return eng })
}

// NewRegistryFunc is NewRegistry for an engine that can be replaced (a
// cluster node's, which a snapshot restore swaps): each scrape reports
// the engine eng returns then.
func NewRegistryFunc(eng func() *engine.Engine) *Registry {
	reg := prometheus.NewRegistry()
	r := &Registry{reg: reg, tcp: newTCP(reg), http: newHTTP(reg)}
	reg.MustRegister(
		newEngineCollector(eng, r.tcp),
		buildInfo(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return r
}

// buildInfo is latchd_build_info: always 1, with the build's identity in
// its labels, so a dashboard can show which version each node runs.
func buildInfo() prometheus.Collector {
	bi := buildinfo.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "latchd_build_info",
		Help:        "Always 1; the labels name the running build: version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "commit": bi.Commit, "goversion": bi.GoVersion},
	})
	g.Set(1)
	return g
}

// MustRegister adds collectors to the registry (cluster state, say).
func (r *Registry) MustRegister(cs ...prometheus.Collector) { r.reg.MustRegister(cs...) }

// TCP returns the TCP server's metrics, for server.WithMetrics.
func (r *Registry) TCP() *TCP { return r.tcp }

// HTTP returns the REST server's metric families.
func (r *Registry) HTTP() *HTTP { return r.http }

// Gatherer returns the underlying registry, for tests and other
// exporters.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// WriteTo writes one scrape in the text format (ContentType) to w. If
// some collector failed, it writes what it gathered and returns the error.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	mfs, gerr := r.reg.Gather()
	var total int64
	for _, mf := range mfs {
		n, err := expfmt.MetricFamilyToText(w, mf)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, gerr
}

// Handler returns a net/http handler serving the registry (with content
// negotiation and gzip, from promhttp).
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

var _ io.WriterTo = (*Registry)(nil)

// errNilRegistry is returned by Serve without a registry.
var errNilRegistry = errors.New("metrics: nil registry")
