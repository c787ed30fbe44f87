// Package fence holds the fencing token that every latchd grant carries and
// the tools a protected resource uses to reject a stale holder.
//
// A token is 32 lowercase hex characters: a 16-hex big-endian fence number
// that strictly increases with every grant the server makes, then 16 hex of
// crypto-random salt. The lock service only hands tokens out; the resource
// must compare them (see Guard), or a holder that paused past its lease can
// still write.
//
// fence imports only the standard library, so a resource server can link it
// without any of latchd's dependencies.
package fence
