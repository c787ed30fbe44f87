package replica

import (
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// A set acquire (OpAcquireSet) with a request id is remembered by its
// result and owner only (setRecord), so the window's snapshot form is the
// one single keys use. A retry is answered from what the set has now:
//
//   - an error, or a result that was neither Granted nor Queued
//     (TimedOut), is answered as recorded;
//   - a set still waiting is taken over by the retry's owner in its place
//     in every queue, with the retry's sink (engine.ReclaimSet; the old
//     sink hears Canceled), as a single key's wait is: the retry answers
//     Queued and hears the grant when the set's turn comes;
//   - a set granted, to the first attempt or while it waited, is taken
//     over by the retry's owner key by key (engine.Reclaim): its tokens,
//     each lease restarted. If a key of it is gone (released, expired),
//     the keys taken over are released and the retry is applied as new.

// setRecord is what the window keeps of an OpAcquireSet's reply: its
// result in Outcome.Result, or its error.
func setRecord(r Reply) Reply {
	out := Reply{Err: r.Err}
	if r.Set != nil {
		out.Outcome.Result = r.Set.Result
	}
	return out
}

// dedupSet answers c, a retried OpAcquireSet whose id rec holds, as the
// comment above says; false: apply c as new.
func (f *FSM) dedupSet(e *engine.Engine, now int64, c *Command, rec *dedupRecord, sink engine.Sink) (Reply, bool) {
	if rec.reply.Err != nil {
		return Reply{Err: rec.reply.Err}, true
	}
	var keys [codec.MaxKeys][]byte
	n, ok := codec.SplitKeys(c.Key, keys[:])
	if !ok || n > engine.MaxSetKeys {
		return Reply{}, false // applying it refuses it
	}
	res := rec.reply.Outcome.Result
	if res != engine.Granted && res != engine.Queued {
		return Reply{Set: &engine.SetOutcome{Result: res, N: n}}, true
	}
	if res == engine.Queued {
		var ss engine.SetSink
		if rs, ok := sink.(*routeSink); ok {
			ss = rs
		}
		if e.ReclaimSet(now, keys[0], rec.owner, c.Owner, ss) {
			rec.owner = c.Owner
			return Reply{Set: &engine.SetOutcome{Result: engine.Queued, N: n}}, true
		}
	}
	out := &engine.SetOutcome{Result: engine.Granted, N: n}
	got := 0
	for got < n {
		o, ok := e.Reclaim(now, keys[got], rec.owner, c.Owner, nil)
		if !ok || o.Result != engine.Granted {
			break
		}
		out.Tokens[got], out.TTL = o.Token, o.TTL
		got++
	}
	if got < n {
		if got > 0 {
			_ = e.ReleaseSet(now, keys[:got], out.Tokens[:got], nil)
		}
		return Reply{}, false
	}
	rec.owner = c.Owner
	return Reply{Set: out}, true
}
