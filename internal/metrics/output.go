package metrics

import "github.com/prometheus/client_golang/prometheus"

// NewOutputCollector returns a collector reporting, at each scrape,
// latchd_output_unsent_bytes (what used returns: the answers buffered for
// clients that have not read them yet, TCP and REST) and
// latchd_output_budget_bytes (max; 0 means no budget).
func NewOutputCollector(used func() int64, max int64) prometheus.Collector {
	return outputCollector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latchd_output_unsent_bytes",
			Help: "Answers buffered for clients that have not read them yet, TCP and REST."},
			func() float64 { return float64(used()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latchd_output_budget_bytes",
			Help: "The budget of unsent answers (--max-output-mb); 0: none."},
			func() float64 { return float64(max) }),
	}
}

type outputCollector [2]prometheus.GaugeFunc

// Describe implements prometheus.Collector.
func (c outputCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c {
		g.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c outputCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c {
		g.Collect(ch)
	}
}
