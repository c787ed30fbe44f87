// Package metrics writes the engine's counters and gauges in the
// Prometheus text exposition format, so every listener that serves
// /metrics reports them under the same names.
//
// It keeps no state: the caller reads engine.Metrics once per scrape and
// passes the values in. No key ever becomes a label.
package metrics
