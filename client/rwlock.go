package client

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/latchd/latchd/codec"
)

// RWLock is a read-write lock on one key: many readers (RLock) hold it
// together, or one writer (Lock) alone. The queue is strict FIFO: a waiting
// writer holds back every reader that comes after it, and readers at the
// head of the queue are granted together, so neither side starves. Every
// grant has a fence above every earlier grant on the key, so a resource
// that checks fences rejects a reader or writer that came before.
//
// Fields, renewal, Lost, Err, Fence and Release are those of Lock. One
// RWLock holds one grant at a time, read or write: take a read and a
// write hold of one key from two RWLocks. The key must not be in use as a
// lock or semaphore (ErrLimitMismatch).
type RWLock struct {
	Key            string
	AcquireTimeout time.Duration
	LeaseTTL       int
	Servers        []string
	Cluster        []string
	AuthToken      string
	TLSConfig      *tls.Config
	Options        []Option
	LockDelay      time.Duration // as Lock.LockDelay

	leased
}

// The read-write verbs: rl rr rn re rw (shared) and wl wr wn we ww
// (exclusive), each with its lock verb's arguments.
var (
	readCmds  = cmds{codec.CmdReadLock, codec.CmdReadRelease, codec.CmdReadRenew, codec.CmdReadEnqueue, codec.CmdReadWait, false}
	writeCmds = cmds{codec.CmdWriteLock, codec.CmdWriteRelease, codec.CmdWriteRenew, codec.CmdWriteEnqueue, codec.CmdWriteWait, false}
)

func (l *RWLock) slots(k cmds) slots {
	return slots{k: k, key: l.Key, limit: 1, timeout: l.AcquireTimeout, ttlSeconds: l.LeaseTTL,
		servers: l.Servers, cluster: l.Cluster, auth: l.AuthToken, tls: l.TLSConfig, opts: l.Options}
}

// RLock waits up to AcquireTimeout for a shared (read) hold: true when
// granted, false (and a nil error) when the wait timed out.
func (l *RWLock) RLock(ctx context.Context) (bool, error) {
	return l.l.acquire(WithLockDelay(ctx, l.LockDelay), l.slots(readCmds))
}

// Lock waits up to AcquireTimeout for the exclusive (write) hold.
func (l *RWLock) Lock(ctx context.Context) (bool, error) {
	return l.l.acquire(WithLockDelay(ctx, l.LockDelay), l.slots(writeCmds))
}

// REnqueue is the first phase of a two-phase RLock: true when granted at
// once, false when queued (call Wait next).
func (l *RWLock) REnqueue(ctx context.Context) (acquired bool, err error) {
	return l.l.enqueue(WithLockDelay(ctx, l.LockDelay), l.slots(readCmds))
}

// Enqueue is the first phase of a two-phase Lock.
func (l *RWLock) Enqueue(ctx context.Context) (acquired bool, err error) {
	return l.l.enqueue(WithLockDelay(ctx, l.LockDelay), l.slots(writeCmds))
}

// Wait blocks up to timeout for the hold an REnqueue or Enqueue queued
// for (the server knows which), as Lock.Wait.
func (l *RWLock) Wait(ctx context.Context, timeout time.Duration) (bool, error) {
	return l.l.wait(ctx, l.slots(readCmds), timeout)
}
