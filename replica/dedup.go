package replica

import (
	"encoding/binary"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

// DedupWindow is how many request ids the FSM remembers (the latest ones,
// in log order): a command whose ReqKey is among them is not applied
// again but answered as the first one was. Bounded so that a client that
// sends an id with every request costs a fixed amount of memory.
const DedupWindow = 1 << 15

// dedupRecord is what the FSM remembers of a command with a request id:
// its op, the owner that made it, and what applying it answered.
type dedupRecord struct {
	op    Op
	owner engine.OwnerID
	reply Reply
}

// dedup is the window of recent request ids, evicted oldest first (in
// log order, so every replica evicts the same ones). Under FSM.mu.
type dedup struct {
	m    map[string]*dedupRecord
	ring []string // the ids in log order from ring[head], when full
	head int
}

// idempotentOp reports whether commands of op are de-duplicated by their
// request id.
func idempotentOp(op Op) bool {
	switch op {
	case OpAcquire, OpEnqueue, OpWait, OpRelease, OpRenew, OpAcquireSet:
		return true
	}
	return false
}

// put records what the command with request id key answered; an id seen
// before gets the new record in its old place.
func (d *dedup) put(key string, r dedupRecord) {
	if d.m == nil {
		d.m = make(map[string]*dedupRecord)
	}
	if old := d.m[key]; old != nil {
		*old = r
		return
	}
	if len(d.ring) < DedupWindow {
		d.ring = append(d.ring, key)
	} else {
		delete(d.m, d.ring[d.head])
		d.ring[d.head] = key
		d.head = (d.head + 1) % len(d.ring)
	}
	d.m[key] = &r
}

// ordered returns the ids oldest first.
func (d *dedup) ordered() []string {
	return append(d.ring[d.head:len(d.ring):len(d.ring)], d.ring[:d.head]...)
}

// applyDedup answers c from the window when its request id is there, and
// reports whether it did. A retry is answered as the first command was;
// where that answer was a grant or a place in a queue, the retry's owner
// (a new connection) takes it over with engine.Reclaim, with sink for a
// place. A grant or place since gone (released, expired, timed out,
// withdrawn) is not found, and the retry is applied as new. A renewal
// that succeeded is run again, so the lease is measured from the retry;
// the rest (a release, an error, a timeout) is answered as recorded.
func (f *FSM) applyDedup(e *engine.Engine, now int64, c *Command, sink engine.Sink) (Reply, bool) {
	rec := f.dedup.m[string(c.ReqKey)]
	if rec == nil {
		return Reply{}, false
	}
	if rec.op != c.Op {
		return Reply{Err: engine.ErrBadRequest}, true
	}
	if c.Op == OpAcquireSet {
		return f.dedupSet(e, now, c, rec, sink)
	}
	r := rec.reply
	switch {
	case r.Err != nil:
		return r, true
	case c.Op == OpRelease:
		return r, true
	case c.Op == OpRenew:
		r.TTL, r.Err = e.RenewAs(now, c.Key, c.Token, c.TTL, c.Owner)
		return r, true
	case r.Outcome.Result != engine.Granted && r.Outcome.Result != engine.Queued:
		return r, true
	}
	out, ok := e.Reclaim(now, c.Key, rec.owner, c.Owner, sink)
	if !ok {
		return Reply{}, false
	}
	rec.owner = c.Owner
	if out.Result == engine.Granted {
		r.Outcome = out
	} else if c.Op == OpEnqueue {
		r.Outcome = engine.Outcome{Result: engine.Queued}
	}
	return r, true
}

// record remembers what c answered, when c carries a request id.
func (f *FSM) record(c *Command, r Reply) {
	if len(c.ReqKey) == 0 || !idempotentOp(c.Op) {
		return
	}
	if c.Op == OpAcquireSet {
		r = setRecord(r)
	}
	f.dedup.put(string(c.ReqKey), dedupRecord{op: c.Op, owner: c.Owner, reply: r})
}

// dedupErrs are the errors a record may hold, by their code in a
// snapshot (0 is none).
var dedupErrs = [...]error{nil, engine.ErrMaxKeys, engine.ErrOwnerMaxKeys, engine.ErrMaxWaiters,
	engine.ErrLimitMismatch, engine.ErrNotHolder, engine.ErrAlreadyQueued, engine.ErrNotQueued,
	engine.ErrLeaseExpired, engine.ErrMaxSessions, engine.ErrBadRequest, engine.ErrDraining, ErrBadCommand}

// errCode returns err's code in dedupErrs (ErrBadRequest's for another).
func errCode(err error) byte {
	for i, e := range dedupErrs {
		if e == err {
			return byte(i)
		}
	}
	return 10
}

// appendDedup appends the window, oldest first: its length, then per id
// the id, op, owner, result, token, TTLs, OK and error code.
func (d *dedup) appendTo(b []byte) []byte {
	ids := d.ordered()
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		r := d.m[id]
		b = appendString(b, id)
		b = append(b, byte(r.op), byte(r.reply.Outcome.Result))
		b = binary.AppendUvarint(b, uint64(r.owner))
		b = binary.AppendUvarint(b, r.reply.Outcome.Token.Fence)
		b = binary.BigEndian.AppendUint64(b, r.reply.Outcome.Token.Salt)
		b = binary.AppendVarint(b, int64(r.reply.Outcome.TTL))
		b = binary.AppendVarint(b, int64(r.reply.TTL))
		ok := byte(0)
		if r.reply.OK {
			ok = 1
		}
		b = append(b, ok, errCode(r.reply.Err))
	}
	return b
}

// readDedup reads what appendTo wrote into a new window.
func readDedup(d *decoder) (dedup, bool) {
	var w dedup
	n := d.uvarint()
	if n > DedupWindow || n > uint64(len(d.b)) {
		return w, false
	}
	for range n {
		id := string(d.bytes())
		var r dedupRecord
		hdr := d.take(2)
		r.owner = engine.OwnerID(d.uvarint())
		r.reply.Outcome.Token = fence.Token{Fence: d.uvarint(), Salt: d.fixed64()}
		r.reply.Outcome.TTL = time.Duration(d.varint())
		r.reply.TTL = time.Duration(d.varint())
		tail := d.take(2)
		if d.bad || id == "" || w.m[id] != nil || int(tail[1]) >= len(dedupErrs) {
			return w, false
		}
		r.op, r.reply.Outcome.Result = Op(hdr[0]), engine.Result(hdr[1])
		r.reply.OK, r.reply.Err = tail[0] == 1, dedupErrs[tail[1]]
		w.put(id, r)
	}
	return w, true
}

// take returns the next n bytes.
func (d *decoder) take(n int) []byte {
	if len(d.b) < n {
		d.fail()
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}
