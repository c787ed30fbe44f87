// Package backend is the one seam between latchd's front ends (the TCP
// server and the REST API) and the state they serve: a single node's
// engine, called in place at the clock's now with a fresh token salt
// (Local), or a raft group's replicated engine (a *replica.Node, which
// satisfies Backend in replica/backend.go). The front ends hold a Backend
// and never learn which one it is.
//
// A call answers at once or, on a replicated backend, later (Submit's
// pending); Do is the blocking form, for front ends that have a goroutine
// to block (the REST API's fasthttp workers).
//
// The package imports only engine, fence and internal/clock: it knows
// nothing of the network, of raft or of the front ends.
//
// Concurrency: every method is safe from any goroutine. Local answers on
// the caller's goroutine and calls Sinks and Vias as the engine does; a
// Later must not block.
package backend
