package replica

import (
	"testing"
	"time"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
)

// TestRWCommands checks a read-write acquire and enqueue are logged as
// their own ops, survive the encoding, and apply with their mode.
func TestRWCommands(t *testing.T) {
	for _, tt := range []struct {
		op   backend.Op
		mode engine.Mode
		want Op
	}{
		{backend.OpAcquire, engine.ModeRead, OpRWAcquire},
		{backend.OpAcquire, engine.ModeWrite, OpRWAcquire},
		{backend.OpEnqueue, engine.ModeWrite, OpRWEnqueue},
		{backend.OpAcquire, engine.ModeSlot, OpAcquire},
	} {
		c, ok := command(&backend.Request{Op: tt.op, Mode: tt.mode, Key: []byte("k"), Owner: 1, Limit: 1})
		if !ok || c.Op != tt.want {
			t.Fatalf("%v %v logged as %v", tt.op, tt.mode, c.Op)
		}
		if tt.mode != engine.ModeSlot && c.Limit != int(tt.mode) {
			t.Fatalf("mode %v logged with Limit %d", tt.mode, c.Limit)
		}
		var got Command
		if err := DecodeCommand(AppendCommand(nil, &c), &got); err != nil || !commandsEqual(got, c) {
			t.Fatalf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
	f := newTestFSM(t, 0)
	read := Command{Op: OpRWAcquire, Now: sec, Owner: 1, Key: []byte("k"), Limit: int(engine.ModeRead), TTL: time.Minute}
	if r := fsmApply(t, f, 1, read); r.Err != nil || r.Outcome.Result != engine.Granted {
		t.Fatalf("first reader: %+v", r)
	}
	read.Owner = 2
	if r := fsmApply(t, f, 2, read); r.Err != nil || r.Outcome.Result != engine.Granted {
		t.Fatalf("second reader: %+v", r)
	}
	write := Command{Op: OpRWAcquire, Now: sec, Owner: 3, Key: []byte("k"), Limit: int(engine.ModeWrite), TTL: time.Minute}
	if r := fsmApply(t, f, 3, write); r.Err != nil || r.Outcome.Result != engine.TimedOut {
		t.Fatalf("try-writer over readers: %+v", r)
	}
	lock := Command{Op: OpAcquire, Now: sec, Owner: 3, Key: []byte("k"), Limit: 1, TTL: time.Minute}
	if r := fsmApply(t, f, 4, lock); r.Err != engine.ErrLimitMismatch {
		t.Fatalf("lock on a read-held key: %+v", r)
	}
}
