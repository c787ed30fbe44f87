// Package engine is latchd's state machine: named resources with a slot
// limit (a lock is a resource with limit 1, a semaphore one with limit > 1),
// strict FIFO wait queues, leases, two-phase enqueue/wait, fencing tokens,
// idle-key garbage collection and owner tracking.
//
// The engine knows nothing of the network. It starts no goroutine, does no
// I/O, reads no clock and logs nothing: every mutating call takes now (Unix
// nanoseconds) from the caller, and every grant's salt comes in with the
// request that asked for it. Given the same sequence of calls and inputs,
// two engines built with the same Config reach the same state, which is
// what lets a Raft log replay it later.
//
// Concurrency: keys are spread over a power-of-two number of shards, each
// with its own mutex; no call holds two shard locks at once, and there is
// no global lock on any per-request path. A request that cannot be answered
// at once is parked with a Sink; the engine calls Sink.Deliver exactly once
// per parked request, after dropping the shard lock, on whichever goroutine
// made the slot free (a Release, an Expire, a DropOwner). Deadlines (lease
// expiry, wait timeouts, idle keys) live in a per-shard heap that the
// caller advances by calling Expire from one clock goroutine.
package engine
