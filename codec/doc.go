// Package codec is latchd's wire protocol: an incremental decoder for the
// three-line requests (command, key, argument) and append-style encoders for
// the one-line responses, plus the response decoder the Go client uses.
//
// Nothing here allocates on the request path: Decode returns views into the
// buffer it was given, and every encoder appends to a caller's slice. codec
// knows nothing of the engine or the network, and imports only the standard
// library, so the client and the server link one definition of the protocol.
//
// Decode reports two kinds of error. A framing error (a line over the limit)
// means the stream can no longer be split into requests; it comes back with
// n == 0. A request error means one whole request was consumed but is
// invalid (unknown command, bad key, bad integer, ...); it comes back with
// n > 0. The wire contract answers both with "error" and closes the
// connection; the distinction lets that policy live in one place.
package codec
