// Package httpfast serves latchd's REST API on fasthttp over the same
// engine as the TCP server, so an HTTP session and a TCP connection waiting
// on one key share one FIFO queue.
//
// A session is an engine owner with an idle TTL. Its owner ID has the top
// bit set (1<<63 | counter), so it never collides with a TCP connection's
// ID, which counts up from 1; its session_id is 128 crypto-random bits in
// hex, mapped to the owner ID here. Every request of a session calls
// engine.BeginSession first and engine.EndSession last, so a session that
// is waiting never expires; the engine expires idle sessions from Expire,
// which this package never calls: whoever owns the engine drives it.
//
// The package is thin: it decodes JSON, makes one engine call with the
// session's owner ID and encodes the answer by appending (no fmt on the
// lock routes). It never imports codec or server, and never decides lock
// semantics: that is the engine's job. The calls go through a
// backend.Backend: a single node's engine, or a replicated node that
// proposes each one through raft (see cluster.go; owner IDs then carry a
// per-process random prefix); the handlers never tell them apart.
// WithAdmin adds the cluster admin API over a backend.Admin (admin.go).
//
// Concurrency: fasthttp runs each connection on its own goroutine. A
// blocking acquire or wait parks in the engine with a one-slot channel Sink
// and blocks that goroutine until the engine delivers the one Outcome it
// owes (a grant, a timeout at the engine's deadline, or Canceled when the
// session is closed). Stop closes every session, so no handler outlives it.
// The session registry and the per-IP rate limiter each have one mutex that
// takes no other lock and calls nothing while held.
package httpfast
