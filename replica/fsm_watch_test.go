package replica

import (
	"errors"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// TestFSMLockDelayAndWatch: a lock-delay applied from the log and a
// request's own delay survive a snapshot restore; a watcher of the node
// is told to watch again (ErrWatchReset), and the Hub stays the node's.
func TestFSMLockDelayAndWatch(t *testing.T) {
	src := newTestFSM(t, 1)
	fsmApply(t, src, 1, Command{Op: OpAcquire, Now: sec, Owner: 1, Key: []byte("a"), Limit: 1, Salt: 1, LockDelay: 5 * time.Second})
	fsmApply(t, src, 2, Command{Op: OpDisconnect, Now: 2 * sec, Owner: 1, Release: true})
	state := src.appendState(nil)

	dst := newTestFSM(t, 2)
	hub := dst.Engine().Hub()
	w, err := dst.Engine().Watch("a", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Restore(state); err != nil {
		t.Fatal(err)
	}
	for {
		_, ok, err := w.TryNext()
		if !ok {
			if !errors.Is(err, engine.ErrWatchReset) {
				t.Fatalf("watcher after a restore: %v", err)
			}
			break
		}
	}
	if dst.Engine().Hub() != hub {
		t.Fatal("the restored engine publishes to another Hub")
	}
	for _, f := range []*FSM{src, dst} {
		r := fsmApply(t, f, 3, Command{Op: OpAcquire, Now: 6*sec + 1, Owner: 2, Key: []byte("a"), Limit: 1, Salt: 2})
		if r.Err != nil || r.Outcome.Result != engine.TimedOut {
			t.Fatalf("acquire during the delay: %+v", r)
		}
		fsmApply(t, f, 4, Command{Op: OpExpire, Now: 7 * sec})
		r = fsmApply(t, f, 5, Command{Op: OpAcquire, Now: 7 * sec, Owner: 2, Key: []byte("a"), Limit: 1, Salt: 3})
		if r.Err != nil || r.Outcome.Result != engine.Granted {
			t.Fatalf("acquire after the delay: %+v", r)
		}
	}
}
