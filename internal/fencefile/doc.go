// Package fencefile is the durable fence-counter journal behind
// latchd --fence-state-file: it makes sure no fence number is ever issued
// twice, across restarts, kill -9, power loss and wall-clock steps.
//
// The journal records a limit, the highest fence the running process may
// issue: Reserve raises it by a range with one write and one fsync, and
// the engine issues fences freely below it (engine.Config.FenceLimit).
// After a crash, Open seeds the engine at the stored limit: the cost of a
// crash is a gap in the numbers, never a repeat.
//
// The file holds two checksummed slots in separate 4 KiB blocks, written
// alternately, so a torn write damages only the slot being written; Open
// falls back to the other with a safety margin, and refuses (ErrCorrupt)
// when neither is readable. See docs/fencing.md. The file is held with
// flock(2) for the life of the Journal (ErrLocked).
//
// A Journal's methods are safe for concurrent use; Reserve blocks for an
// fsync. Keep reserves ahead of use, so the engine's synchronous
// FenceReserve (an fsync under a shard lock) stays rare.
package fencefile
