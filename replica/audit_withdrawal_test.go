package replica

import (
	"testing"
	"time"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
)

// laterChan is a backend.Later that hands the reply to a channel.
type laterChan chan error

func (l laterChan) Answer(_ backend.Reply, err error) { l <- err }

// TestAudit_WithdrawalGoesThroughLog: every way a wait is withdrawn (a
// cancel, a timeout, the waiter's disconnect) and a disconnect's release
// change every replica, not only the leader's engine. The requests go in
// through the backend, as the front ends send them; then the leader dies,
// and the new leader must grant the lock to the one waiter still waiting,
// never to a withdrawn one, and must not keep the disconnected holder's
// lock. Every replica must also write the same state before the failover.
func TestAudit_WithdrawalGoesThroughLog(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	const (
		holder    engine.OwnerID = 1 // holds k throughout
		timedOut  engine.OwnerID = 2 // queued on k with a short timeout
		canceled  engine.OwnerID = 3 // queued on k, cancels
		gone      engine.OwnerID = 4 // queued on k, disconnects
		survivor  engine.OwnerID = 5 // queued on k, still waiting at the failover
		dropped   engine.OwnerID = 6 // holds d, disconnects with release
		newcomer  engine.OwnerID = 7 // takes d after the failover
		longWait                 = time.Minute
		shortWait                = 300 * time.Millisecond
	)
	do := func(r backend.Request, sink engine.Sink) backend.Reply { return mustDo(t, l, r, sink) }
	grant := acquireVia(t, l, "k", holder, 0, nil)
	if grant.Result != engine.Granted {
		t.Fatalf("holder's acquire: %v", grant.Result)
	}
	sinks := map[engine.OwnerID]chanSink{}
	for _, w := range []struct {
		owner   engine.OwnerID
		timeout time.Duration
	}{{timedOut, shortWait}, {canceled, longWait}, {gone, longWait}, {survivor, longWait}} {
		sinks[w.owner] = newChanSink()
		if o := acquireVia(t, l, "k", w.owner, w.timeout, sinks[w.owner]); o.Result != engine.Queued {
			t.Fatalf("owner %d's acquire: %v; want queued", w.owner, o.Result)
		}
	}
	if o := acquireVia(t, l, "d", dropped, 0, nil); o.Result != engine.Granted {
		t.Fatalf("owner %d's acquire of d: %v", dropped, o.Result)
	}

	// The timeout is the leader's clock's business: it must reach the
	// replicas as an entry.
	if o := sinks[timedOut].wait(t, 5*time.Second); o.Result != engine.TimedOut {
		t.Fatalf("short wait ended %v; want timed out", o.Result)
	}
	if rep := do(backend.Request{Op: backend.OpCancelWait, Key: []byte("k"), Owner: canceled}, nil); !rep.OK {
		t.Fatal("cancel found no wait")
	}
	if o := sinks[canceled].wait(t, 5*time.Second); o.Result != engine.Canceled {
		t.Fatalf("canceled wait ended %v", o.Result)
	}
	// Disconnects go as the TCP server sends them: Submit, heard later.
	disconnectVia(t, l, gone, false)
	disconnectVia(t, l, dropped, true)
	if o := sinks[gone].wait(t, 5*time.Second); o.Result != engine.Canceled {
		t.Fatalf("disconnected waiter's wait ended %v", o.Result)
	}
	waitSame(t, c.live()...)

	c.kill(t, c.index(l))
	nl := c.leader(t)
	rep, err := nl.Do(backend.Request{Op: backend.OpRelease, Key: []byte("k"), Token: grant.Token}, nil)
	if err != nil {
		t.Fatalf("release on the new leader: %v (%+v)", err, rep)
	}
	// The surviving waiter's Sink died with the old leader; the grant is
	// in the state.
	var got engine.LockStat
	poll(t, 5*time.Second, "k granted on the new leader", func() bool {
		var ok bool
		got, ok = lockHolder(nl, "k", time.Now().UnixNano())
		return ok
	})
	if got.OwnerConnID != uint64(survivor) || got.Waiters != 0 {
		t.Fatalf("new leader granted k to owner %d with %d still queued; want %d and none (owners %d, %d, %d withdrew)",
			got.OwnerConnID, got.Waiters, survivor, timedOut, canceled, gone)
	}
	o, err := nl.Do(backend.Request{Op: backend.OpAcquire, Key: []byte("d"), Owner: newcomer, Limit: 1, TTL: time.Minute}, nil)
	if err != nil || o.Outcome.Result != engine.Granted {
		t.Fatalf("acquire of d on the new leader: %v, %v; the disconnected holder kept it", o.Outcome.Result, err)
	}
	waitSame(t, c.live()...)
}

// mustDo runs r on n through the backend, failing the test on an error.
func mustDo(t *testing.T, n *Node, r backend.Request, sink engine.Sink) backend.Reply {
	t.Helper()
	rep, err := n.Do(r, sink)
	if err != nil {
		t.Fatalf("%v of owner %d: %v", r.Op, r.Owner, err)
	}
	return rep
}

// acquireVia acquires key for owner on n through the backend.
func acquireVia(t *testing.T, n *Node, key string, owner engine.OwnerID, timeout time.Duration, sink engine.Sink) engine.Outcome {
	t.Helper()
	return mustDo(t, n, backend.Request{Op: backend.OpAcquire, Key: []byte(key), Owner: owner, Limit: 1,
		TTL: time.Minute, Timeout: timeout}, sink).Outcome
}

// disconnectVia submits owner's Disconnect on n as the TCP server does
// (Submit, answered later) and waits for its answer.
func disconnectVia(t *testing.T, n *Node, owner engine.OwnerID, release bool) {
	t.Helper()
	done := make(laterChan, 1)
	r := backend.Request{Op: backend.OpDisconnect, Owner: owner, Release: release}
	if _, pending, err := n.Submit(&r, nil, nil, done); err != nil || !pending {
		t.Fatalf("disconnect of %d: pending %v, %v", owner, pending, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("disconnect of %d: %v", owner, err)
	}
}
