// Package httpfast serves latchd's REST API on fasthttp over the same
// state as the TCP server, so an HTTP session and a TCP connection waiting
// on one key share one FIFO queue.
//
// A session is an engine owner with an idle TTL (sessions.go). Every
// request of a session begins and ends it in the engine, so a session
// that is waiting never expires.
//
// The package is thin: it decodes JSON, makes one call to a
// backend.Backend, which may be replicated (cluster.go), and encodes the
// answer by appending; lock semantics are the engine's. WithAdmin adds
// the cluster admin API (admin.go).
//
// Concurrency: fasthttp runs each connection on its own goroutine. A
// blocking acquire or wait parks with a one-slot channel Sink until the
// one Outcome it is owed arrives (a grant, a timeout, or Canceled when
// the session is closed). Stop closes every session, so no handler
// outlives it. The session registry's mutex may take the engine's, never
// the other way round.
package httpfast
