// Package fencefile is the durable fence-counter journal behind
// latchd --fence-state-file: it makes sure no fence number is ever issued
// twice, across restarts, kill -9, power loss and wall-clock steps.
//
// The journal never records each fence. It records a limit: the highest
// fence number the running process may issue. Reserve raises the limit by
// a range (default 1<<20) with one write and one fsync, and the engine
// issues fences freely below it (engine.Config.FenceLimit). After any
// crash the next Open seeds the engine at the stored limit, which is at or
// above every fence the previous process could have handed out; the cost
// of a crash is a gap in the numbers, never a repeat.
//
// The file holds two checksummed slots in separate 4 KiB blocks. Writes
// alternate between them, so a write torn by power loss can only damage
// the slot being written, and that write had not returned, so no fence
// above the other slot's limit was issued. Open falls back to the
// surviving slot with a safety margin, and refuses (ErrCorrupt) when
// neither slot is readable rather than guess. See docs/fencing.md.
//
// The file is held with flock(2) for the life of the Journal: a second
// process (or a second Open in the same process) gets ErrLocked.
//
// Concurrency: a Journal's methods are safe for concurrent use. Reserve
// serialises on a mutex and blocks for an fsync; Seed and Limit do not
// block. Keep is the one goroutine a server runs to reserve ahead of use,
// so the engine's synchronous FenceReserve path (an fsync under a shard
// lock) stays rare. The package imports only the standard library and
// never touches an engine directly: the caller wires it through closures.
package fencefile
