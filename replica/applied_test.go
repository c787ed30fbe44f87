package replica

import (
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"go.etcd.io/raft/v3"
)

// indexSink records the FSM's applied index when its grant is delivered,
// which the engine does while it applies the entry that grants it.
type indexSink struct {
	f  *FSM
	at chan uint64
}

func (s indexSink) Deliver(engine.Outcome) { s.at <- s.f.AppliedIndex() }

// The applied index, which a read barrier compares with the leader's
// commit index without the FSM's lock, counts an entry only once its
// effects are in the engine: read while an entry is applied, it is the
// index before.
func TestAppliedIndexCountsAnEntryOnceApplied(t *testing.T) {
	f := newTestFSM(t, 11)
	s := indexSink{f: f, at: make(chan uint64, 1)}
	f.register(5, s)
	fsmApply(t, f, 1, Command{Op: OpAcquire, Now: sec, Origin: 11, ReqID: 4, Owner: 1, Key: []byte("a"), Limit: 1, Salt: 1})
	fsmApply(t, f, 2, Command{Op: OpAcquire, Now: sec, Origin: 11, ReqID: 5, Owner: 2, Key: []byte("a"), Limit: 1,
		Timeout: time.Minute, Salt: 2})
	if r := fsmApply(t, f, 3, Command{Op: OpRelease, Now: 2 * sec, Key: []byte("a"), Token: fence.Token{Fence: 1, Salt: 1}}); r.Err != nil {
		t.Fatalf("Release: %v", r.Err)
	}
	select {
	case got := <-s.at:
		if got != 2 {
			t.Fatalf("while entry 3 was applied the applied index was %d, want 2", got)
		}
	default:
		t.Fatal("the grant was not delivered while its entry was applied")
	}
	if got := f.AppliedIndex(); got != 3 {
		t.Fatalf("applied index %d after entry 3, want 3", got)
	}
}

// A read round the leader answered with an index this node has not
// applied yet finishes only once the apply reaches that index.
func TestReadRoundWaitsForTheApply(t *testing.T) {
	n := &Node{fsm: newTestFSM(t, 1)}
	fsmApply(t, n.fsm, 1, Command{Op: OpAcquire, Now: sec, Owner: 1, Key: []byte("a"), Limit: 1, Salt: 1})
	r := &readRound{done: make(chan struct{}), key: "round", waiters: 1}
	n.reads.sent = map[string]*readRound{r.key: r}
	n.readStates([]raft.ReadState{{Index: 2, RequestCtx: []byte(r.key)}})
	select {
	case <-r.done:
		t.Fatalf("the round finished (%v) at applied index %d, before its index 2", r.err, n.fsm.AppliedIndex())
	default:
	}
	fsmApply(t, n.fsm, 2, Command{Op: OpAcquire, Now: sec, Owner: 2, Key: []byte("b"), Limit: 1, Salt: 2})
	n.readsApplied()
	select {
	case <-r.done:
		if r.err != nil {
			t.Fatalf("the round failed: %v", r.err)
		}
	default:
		t.Fatal("the round did not finish once its index was applied")
	}
}
