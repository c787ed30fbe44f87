// Package backend is the one seam between latchd's front ends (the TCP
// server and the REST API) and the state they serve: a single node's
// engine, called in place at the clock's now with a fresh token salt
// (Local), or a raft group's replicated engine (a *replica.Node, which
// satisfies Backend in replica/backend.go). The front ends hold a Backend
// and never learn which one it is.
//
// The package imports only engine, fence and internal/clock. Every method
// is safe from any goroutine; Local answers on the caller's goroutine.
package backend
