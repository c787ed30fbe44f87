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
// A parked request stops decoding on its connection, so answers leave in
// request order. The grant arrives through session.Deliver on whatever
// goroutine freed the slot, which writes it to an idle connection's
// socket itself (handoff.go) or queues it and wakes the connection's loop.
//
// Lock order: session.mu takes no other lock, and nothing is called while
// it is held (docs/locks.md).
package server
