package replica

import "github.com/latchd/latchd/engine"

// A read-write acquire or enqueue is logged as its own op (OpRWAcquire,
// OpRWEnqueue) with the engine.Mode in Limit: a node that does not know
// read-write keys refuses the entry as a bad command instead of applying
// it as a lock, and a log without read-write requests is unchanged.

// rwCommand turns c, an Acquire or Enqueue, into its read-write form.
func rwCommand(c *Command, mode engine.Mode) {
	switch c.Op {
	case OpAcquire:
		c.Op = OpRWAcquire
	case OpEnqueue:
		c.Op = OpRWEnqueue
	default:
		return
	}
	c.Limit = int(mode)
}

// rwReq is the engine request of c, an OpRWAcquire or OpRWEnqueue.
func rwReq(c *Command) engine.AcquireReq {
	return engine.AcquireReq{Key: c.Key, Owner: c.Owner, Mode: engine.Mode(c.Limit), TTL: c.TTL,
		Timeout: c.Timeout, Salt: c.Salt, LockDelay: c.LockDelay}
}

// grants reports whether o may grant a fresh token (it needs a salt).
func (o Op) grants() bool {
	return o == OpAcquire || o == OpEnqueue || o == OpRWAcquire || o == OpRWEnqueue || o == OpAcquireSet
}

// parks reports whether o may park on its key until a grant (a Sink hears it).
func (o Op) parks() bool {
	return o == OpAcquire || o == OpWait || o == OpRWAcquire || o == OpAcquireSet
}
