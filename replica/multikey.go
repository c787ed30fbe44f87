package replica

import (
	"bytes"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// A set of keys (engine.AcquireSet) travels in one OpAcquireSet entry:
// its keys, which hold no space, joined by single spaces in Key. Its
// outcome, when it parks, goes to the proposer's engine.SetSink through
// the same pending table as a single key's Sink (setRoute).

// joinKeys returns keys joined by spaces, in a new slice.
func joinKeys(keys [][]byte) []byte {
	return bytes.Join(keys, []byte{' '})
}

// applyAcquireSet runs an OpAcquireSet entry on e.
func applyAcquireSet(e *engine.Engine, now int64, c *Command, sink engine.Sink) (*engine.SetOutcome, error) {
	var keys [codec.MaxKeys][]byte
	n, ok := codec.SplitKeys(c.Key, keys[:])
	if !ok || n > engine.MaxSetKeys {
		return nil, engine.ErrBadRequest
	}
	var ss engine.SetSink
	if rs, ok := sink.(*routeSink); ok {
		ss = rs
	}
	out, err := e.AcquireSet(now, &engine.SetReq{Keys: keys[:n], Owner: c.Owner, Limit: c.Limit, TTL: c.TTL,
		Timeout: c.Timeout, Salt: c.Salt}, ss)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// setRoute is a proposer's engine.SetSink in the pending table (which
// holds engine.Sinks); a single key's Deliver never reaches it.
type setRoute struct{ s engine.SetSink }

// Deliver implements engine.Sink. An AcquireSet's outcome comes to
// DeliverSet; Deliver is called only by a snapshot restore, which cancels
// every parked request (Restore), and passes that on.
func (r setRoute) Deliver(o engine.Outcome) { r.s.DeliverSet(&engine.SetOutcome{Result: o.Result}) }

// DeliverSet implements engine.SetSink for a set proposed on this node:
// it hands the outcome to the proposer's SetSink, once. It runs on the
// goroutine that applies.
func (s *routeSink) DeliverSet(o *engine.SetOutcome) {
	s.f.pendMu.Lock()
	sink := s.f.pending[s.id]
	delete(s.f.pending, s.id)
	s.f.pendMu.Unlock()
	if r, ok := sink.(setRoute); ok {
		r.s.DeliverSet(o)
	}
}

// queued reports whether r parked its request (a single key's or a set's).
func queued(r *Reply) bool {
	if r.Set != nil {
		return r.Set.Result == engine.Queued
	}
	return r.Outcome.Result == engine.Queued
}
