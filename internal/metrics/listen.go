package metrics

import "github.com/prometheus/client_golang/prometheus"

// Listeners holds the listener families: accept errors and whether each
// listener is accepting. Build it with Registry.Listeners.
type Listeners struct {
	acceptErrors *prometheus.CounterVec
}

// Listeners registers the listener families, once, and returns them.
// down reports the listeners in backoff after an accept error (nil:
// latchd_listener_down is not exported).
func (r *Registry) Listeners(down func() []string) *Listeners {
	l := &Listeners{acceptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchd_accept_errors_total",
		Help: "Failed accepts, by listener (tcp, http, metrics, debug) and reason (emfile, enfile, enobufs, " +
			"enomem, econnaborted, econnreset, eintr, other); a resource error backs the listener off.",
	}, []string{"listener", "reason"})}
	r.reg.MustRegister(l.acceptErrors)
	if down != nil {
		r.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "latchd_listeners_down",
			Help: "Listeners backing off after an accept error (not accepting); /healthz answers 503 while > 0.",
		}, func() float64 { return float64(len(down())) }))
	}
	return l
}

// AcceptError counts one failed accept. Accept errors are rare: the label
// lookup is fine here.
func (l *Listeners) AcceptError(listener, reason string) {
	l.acceptErrors.WithLabelValues(listener, reason).Inc()
}
