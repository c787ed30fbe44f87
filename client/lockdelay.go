package client

import (
	"context"
	"strconv"
	"time"
)

// NoLockDelay, as a lock-delay, asks that the slot be granted again at
// once after an involuntary loss, whatever the server's --lock-delay.
const NoLockDelay = time.Duration(-1)

type lockDelayKey struct{}

// WithLockDelay returns a context whose acquires and enqueues (Acquire,
// SemAcquire, Enqueue, SemEnqueue, Lock and Semaphore) ask for their own
// lock-delay: if the grant is lost involuntarily (its lease runs out, or
// its connection closes), the server grants the slot again only after d.
// d is rounded up to whole milliseconds; NoLockDelay asks for none; 0
// leaves the server's --lock-delay. A server older than lock-delay
// refuses the request as a protocol violation.
func WithLockDelay(ctx context.Context, d time.Duration) context.Context {
	if d == 0 {
		return ctx
	}
	return context.WithValue(ctx, lockDelayKey{}, d)
}

// appendLockDelay appends ctx's lock-delay to an acquire's or enqueue's
// argument as its last field, delay=<ms> (delay=0: none).
func appendLockDelay(ctx context.Context, arg []byte) []byte {
	d, ok := ctx.Value(lockDelayKey{}).(time.Duration)
	if !ok || d == 0 {
		return arg
	}
	ms := int64(0)
	if d > 0 {
		ms = int64((d + time.Millisecond - 1) / time.Millisecond)
	}
	if len(arg) > 0 {
		arg = append(arg, ' ')
	}
	arg = append(arg, "delay="...)
	return strconv.AppendInt(arg, ms, 10)
}
