// Package bench is latchd's load generator. It drives any server that
// speaks the three-line protocol (latchd, dflockd, or the trivial Ceiling
// responder in this package) over TCP, latchd's REST API over HTTP, and a
// Redis server running the classic single-instance lock, and reports
// throughput and latency percentiles as a table, JSON or a plot.
//
// One op is one acquire plus one release. Every worker owns one persistent
// connection (or HTTP keep-alive connection and session) and runs either a
// closed loop (the next op starts when the last one ends) or a fixed-rate
// open loop, where an op's latency is measured from the time it was
// scheduled to start, so a stalled server shows up in the tail instead of
// silently slowing the load (coordinated omission).
//
// bench talks to servers over the network only: it imports codec for the
// wire format, never the engine or the server. Each worker owns its
// connection, buffers and latency histogram; the histograms are merged
// once the row's workers are joined.
package bench
