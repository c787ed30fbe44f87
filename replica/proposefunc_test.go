package replica

import (
	"errors"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

type funcAnswer struct {
	r   Reply
	err error
}

// proposeFunc proposes c through ProposeFunc and waits (bounded) for the
// one answer; a second answer fails the test.
func proposeFunc(t *testing.T, n *Node, c Command, sink engine.Sink) (Reply, error) {
	t.Helper()
	ch := make(chan funcAnswer, 2)
	if err := n.ProposeFunc(c, sink, func(r Reply, err error) { ch <- funcAnswer{r, err} }); err != nil {
		t.Fatalf("ProposeFunc(%v) refused on the leader: %v", c.Op, err)
	}
	var a funcAnswer
	select {
	case a = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("ProposeFunc(%v): no answer", c.Op)
	}
	select {
	case b := <-ch:
		t.Fatalf("ProposeFunc(%v) answered twice: %+v then %+v", c.Op, a, b)
	case <-time.After(20 * time.Millisecond):
	}
	return a.r, a.err
}

// TestProposeFunc: the callback form of Propose answers once with what
// Propose would (a grant, an engine error as the error, a parked request
// as Queued then its Sink), and a follower refuses at once without
// calling back.
func TestProposeFunc(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	key := []byte("pf")

	r, err := proposeFunc(t, l, Command{Op: OpAcquire, Key: key, Owner: 1, Limit: 1, TTL: time.Minute}, nil)
	if err != nil || r.Outcome.Result != engine.Granted {
		t.Fatalf("acquire = %v, %v; want granted", r.Outcome.Result, err)
	}
	tok := r.Outcome.Token

	sink := newChanSink()
	r, err = proposeFunc(t, l, Command{Op: OpAcquire, Key: key, Owner: 2, Limit: 1, TTL: time.Minute, Timeout: time.Minute}, sink)
	if err != nil || r.Outcome.Result != engine.Queued {
		t.Fatalf("second acquire = %v, %v; want queued", r.Outcome.Result, err)
	}

	if _, err := proposeFunc(t, l, Command{Op: OpRelease, Key: key, Token: tok}, nil); err != nil {
		t.Fatalf("release: %v", err)
	}
	select {
	case o := <-sink:
		if o.Result != engine.Granted {
			t.Fatalf("parked acquire heard %v; want granted", o.Result)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("parked acquire never granted")
	}

	// An engine error comes back as the error, as from Propose.
	if _, err := proposeFunc(t, l, Command{Op: OpRelease, Key: key, Token: tok}, nil); !errors.Is(err, engine.ErrNotHolder) {
		t.Fatalf("release of a released token = %v; want ErrNotHolder", err)
	}

	for _, n := range c.live() {
		if n == l {
			continue
		}
		called := make(chan struct{}, 1)
		err := n.ProposeFunc(Command{Op: OpAcquire, Key: key, Owner: 3, Limit: 1}, nil, func(Reply, error) { called <- struct{}{} })
		var nl *NotLeaderError
		if !errors.As(err, &nl) {
			t.Fatalf("ProposeFunc on follower %s = %v; want *NotLeaderError", n.ID(), err)
		}
		select {
		case <-called:
			t.Fatalf("follower %s called back after refusing", n.ID())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
