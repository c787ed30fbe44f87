// Package fence holds the fencing token that every latchd grant carries and
// the tools a protected resource uses to reject a stale holder.
//
// A token is 32 lowercase hex characters: a 16-hex big-endian fence number
// that strictly increases with every grant the server makes, then 16 hex of
// crypto-random salt. The lock service only hands tokens out; the resource
// must compare them (see Guard), or a holder that paused past its lease can
// still write.
//
// Three parties share the safety: the lock server orders the grants, the
// holder sends its token with every write (in the Header), and the resource
// rejects a token older than the newest it has accepted (Guard.Check,
// Guard.Do). Guard is safe for concurrent use; its design (a lock-free mark
// per resource, a per-resource mutex for Do) is described on the type. The
// HTTP middleware and header helpers live in fence/fencehttp (net/http) and
// fence/fencefast (fasthttp), so that fence, which the engine imports, links
// neither.
//
// fence imports only the standard library, so a resource server can link it
// without any of latchd's dependencies.
package fence
