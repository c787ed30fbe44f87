package metrics

import "github.com/prometheus/client_golang/prometheus"

// OutputCollectors returns the collectors reporting, at each scrape,
// latchd_output_unsent_bytes (what used returns: the answers buffered for
// clients that have not read them yet, TCP and REST) and
// latchd_output_budget_bytes (max; 0 means no budget).
func OutputCollectors(used func() int64, max int64) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latchd_output_unsent_bytes",
			Help: "Answers buffered for clients that have not read them yet, TCP and REST."},
			func() float64 { return float64(used()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latchd_output_budget_bytes",
			Help: "The budget of unsent answers (--max-output-mb); 0: none."},
			func() float64 { return float64(max) }),
	}
}
