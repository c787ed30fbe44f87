// Package client is the Go client of latchd (and of dflockd: the wire
// protocol is the same).
//
// Two levels:
//
//   - Conn (from Dial) is one connection with one method per protocol
//     command: Acquire, Release, Renew, Enqueue, Wait, their Sem*
//     counterparts, and Stats. It renews nothing by itself.
//   - Lock, Semaphore and Election hold a lease for you: each grant gets
//     its own connection and a goroutine that renews the lease at half its
//     TTL, and Lost tells the holder when the lease is gone so it stops
//     touching the resource.
//
// In cluster mode, Cluster (from DialCluster) is a Conn that follows the
// raft leader: it reconnects on error_not_leader and on connection
// failures and retries within a budget; acquires carry request ids, so a
// retry after an unknown outcome is applied once, and a session keeps
// what it holds and waits for across a failover. Lock, Semaphore and
// Election with Cluster set use one per grant, so renewals reach a new
// leader.
//
// Outcomes are not failures: a Conn returns ErrTimeout when a wait ends
// without a grant (the connection stays usable), and Lock, Semaphore and
// Election turn that into a false return. Failures are the other sentinel
// errors (ErrMaxLocks, ErrNotHolder, ErrAuth, ...) and *NotLeaderError; test
// them with errors.Is and errors.As.
//
// The protocol has no cancel. Canceling the context of a blocked call
// closes that connection, which makes the server withdraw the wait — and
// release whatever else the connection held.
//
// With several servers, a key goes to ServerFor(servers, key):
// servers[crc32.ChecksumIEEE(key) % len(servers)], the rule of dflockd's
// clients in every language.
//
// Fencing: every grant carries a token whose fence number (Fence,
// FenceFromToken) grows with every grant. A lease can end while its holder
// is paused; the protected resource must compare fences (package fence) to
// reject the late writes of such a zombie.
//
// client imports codec and fence, never the server or the engine.
// Concurrency: a Conn is safe for concurrent use and runs one request at a
// time; Lock, Semaphore and Election serialise their acquire and release
// calls, and their accessors (Token, Fence, Lost, Err) are safe from any
// goroutine.
package client
