package replica

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// failLog makes every later write of n's log fail with errno, as a full
// (ENOSPC) or broken (EIO) disk's do: the bytes may land, their fdatasync
// fails.
func failLog(n *Node, errno syscall.Errno) {
	err := fmt.Errorf("injected: %w", errno)
	n.st.wal.testSyncErr.Store(&err)
}

// diskFaults are the failed writes a node's disk can cause: the log's
// sync on a full or broken disk, and the hard state's write (its file
// closed under it).
var diskFaults = map[string]func(*Node){
	"ENOSPC":    func(n *Node) { failLog(n, syscall.ENOSPC) },
	"EIO":       func(n *Node) { failLog(n, syscall.EIO) },
	"hardstate": func(n *Node) { _ = n.st.hs.Close() },
}

// persistedOK checks that no live node's leader counts n as holding an
// entry past what n's log has written: an entry it could not persist is
// never acknowledged.
func persistedOK(t *testing.T, l, n *Node) {
	t.Helper()
	var match uint64
	l.mu.Lock()
	if pr, ok := l.rn.Status().Progress[n.id]; ok {
		match = pr.Match
	}
	l.mu.Unlock()
	if last := n.st.wal.LastIndex(); match > last {
		t.Fatalf("the leader counts %s as holding entry %d; its log ends at %d", n.ID(), match, last)
	}
}

// A leader whose log writes fail hands over: the other two elect a leader
// that grants within a bounded time, the failed node answers not_leader
// and is never counted as holding what it did not write, and once
// restarted on a good disk it catches up.
func TestLeaderWhoseLogWriteFailsHandsOver(t *testing.T) {
	for name, fault := range diskFaults {
		t.Run(name, func(t *testing.T) { testLeaderHandsOver(t, fault) })
	}
}

func testLeaderHandsOver(t *testing.T, fault func(*Node)) {
	c := newDiskCluster(t, 3, nil)
	li := c.leader(t, -1)
	l := c.nodes[li]
	if o, err := acq(t, l, "before", 1); err != nil || o.Result != engine.Granted {
		t.Fatalf("acquire before the fault: %+v %v", o, err)
	}
	fault(l)
	done := make(chan error, 1)
	go func() { // an entry the failed leader cannot write
		_, err := acq(t, l, "during", 2)
		done <- err
	}()
	ni := -1
	poll(t, 10*time.Second, "new leader among the other two", func() bool {
		for i, n := range c.nodes {
			if i != li && n.IsLeader() {
				ni = i
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("failed node: %+v", l.Status()) })
	nl := c.nodes[ni]
	for i := range 5 {
		if o, err := acq(t, nl, fmt.Sprint("after", i), engine.OwnerID(10+i)); err != nil || o.Result != engine.Granted {
			t.Fatalf("acquire on the new leader: %+v %v", o, err)
		}
	}
	persistedOK(t, nl, l)
	if l.IsLeader() {
		t.Fatal("the failed node still takes commands")
	}
	var nle *NotLeaderError
	if _, err := acq(t, l, "refused", 3); !errors.As(err, &nle) {
		t.Fatalf("acquire on the failed node: %v, want not_leader", err)
	}
	// Its state never catches up again: a consistent read there is
	// refused at once, not left to run out its deadline.
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	if err := l.ReadBarrier(rctx); !errors.As(err, &nle) {
		t.Fatalf("read barrier on the failed node: %v, want not_leader", err)
	}
	if err := <-done; err == nil {
		// Granted: the entry was written and committed before the
		// fault showed (a hard state write fails after the entries').
		// The new leader must hold it.
		if st, ok := lockHolder(nl, "during", nl.now()); !ok || st.OwnerConnID != 2 {
			t.Fatalf("a grant the failed leader answered is not on the new leader: %+v", st)
		}
	}
	if err := l.Ready(); err == nil {
		t.Fatal("the failed node reports ready")
	}

	// The disk is fixed: a restart reads the log back and catches up.
	c.stop(li)
	c.start(li)
	if o, err := acq(t, nl, "restarted", 20); err != nil || o.Result != engine.Granted {
		t.Fatalf("acquire after the restart: %+v %v", o, err)
	}
	c.same(t, 0, 1, 2)
}

// A follower whose log writes fail never acknowledges what it did not
// write and never campaigns; the other two go on granting, and once
// restarted on a good disk it catches up.
func TestFollowerWhoseLogWriteFailsNeverAcks(t *testing.T) {
	for name, fault := range diskFaults {
		t.Run(name, func(t *testing.T) { testFollowerNeverAcks(t, fault) })
	}
}

func testFollowerNeverAcks(t *testing.T, fault func(*Node)) {
	c := newDiskCluster(t, 3, nil)
	li := c.leader(t, -1)
	l := c.nodes[li]
	fi := (li + 1) % 3
	f := c.nodes[fi]
	if o, err := acq(t, l, "before", 1); err != nil || o.Result != engine.Granted {
		t.Fatalf("acquire before the fault: %+v %v", o, err)
	}
	fault(f)
	for i := range 20 {
		if o, err := acq(t, l, fmt.Sprint("after", i), engine.OwnerID(10+i)); err != nil || o.Result != engine.Granted {
			t.Fatalf("acquire with a failed follower: %+v %v", o, err)
		}
	}
	poll(t, 5*time.Second, "the follower's failure seen", func() bool { return f.Ready() != nil })
	persistedOK(t, l, f)
	term := l.term.Load()
	// Longer than an election timeout: a node that cannot write its
	// vote must not start elections either.
	tick := time.NewTicker(l.cfg.ElectionTimeout / 4)
	defer tick.Stop()
	for range 12 {
		<-tick.C
		persistedOK(t, l, f)
	}
	if !l.IsLeader() || l.term.Load() != term {
		t.Fatalf("the leader changed beside a failed follower: %+v", l.Status())
	}

	c.stop(fi)
	c.start(fi)
	if o, err := acq(t, l, "restarted", 40); err != nil || o.Result != engine.Granted {
		t.Fatalf("acquire after the restart: %+v %v", o, err)
	}
	c.same(t, 0, 1, 2)
}
