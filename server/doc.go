// Package server is latchd's TCP front end: a gnet event handler that
// decodes the three-line protocol with codec, calls the backend with the
// connection's owner id, and encodes the answers.
//
// The backend (package backend) is a single node's engine or a replicated
// node; the server has one path for both (submit.go). A call answers at
// once, or the backend says the answer comes later and the connection
// parks until the session, as the request's backend.Later, hears it.
//
// There is no goroutine, channel or timer per connection or per waiter.
// Requests run on the connection's event loop. A blocking request that the
// engine parks stops decoding on that connection: the requests behind it
// stay in gnet's inbound buffer, so answers leave in request order. The
// grant arrives later through session.Deliver on whatever goroutine freed
// the slot. If the connection is parked idle, Deliver writes the answer to
// its socket itself (handoff.go); otherwise it appends the answer to the
// session's inbox and calls conn.Wake, and the connection's own loop
// writes it and resumes decoding.
//
// Lock order: session.mu takes no other lock, and nothing is called while
// it is held (docs/locks.md).
package server
