// Package metrics is latchd's Prometheus instrumentation: one Registry
// per process (a private prometheus.Registry, never the global default)
// holding the engine's counters and gauges, the TCP server's per-command
// counts and latencies, its protocol errors and refusals, the REST
// server's per-route latencies and response codes, and the Go runtime and
// process collectors. Every histogram is a classic Prometheus histogram
// with le buckets, so histogram_quantile works on it.
//
// Labels come only from fixed sets: wire command names, protocol error
// reasons, refusal reasons, REST route names and status codes. A key
// never becomes a label.
//
// Everything is safe for concurrent use. The request path only does
// atomic adds (TCP, HTTP); the engine is read once per scrape.
package metrics
