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
// Concurrency: everything is safe for concurrent use. The TCP and HTTP
// types resolve every labelled child at construction, so the request path
// only does atomic adds and never allocates. The engine is read once per
// scrape (engine.Metrics and LastFence), not on the request path.
package metrics
