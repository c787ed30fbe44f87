package replica

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/engine"
)

// restartAt starts a stopped node again on its own directory and raft
// address (the others know it there), retrying while the port is still
// held by the stopped node's sockets.
func restartAt(t *testing.T, cfg Config) (*Node, error) {
	t.Helper()
	var (
		st  Storage
		err error
	)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err = DiskStorage(cfg, zap.NewNop())
		if err == nil || errors.Is(err, errWALCorrupt) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the stopped node's port, released soon
	}
	if err != nil {
		return nil, err
	}
	n, err := New(cfg, zap.NewNop(), st)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return n, nil
}

// setDiskCommit rewrites the hard state's commit index, as when the write
// that raised it never reached the disk (a commit index is written
// unsynced: writeHardState).
func setDiskCommit(t *testing.T, dir string, commit uint64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "hardstate"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st := Storage{dir: dir, hs: f}
	hs, err := st.readHardState()
	if err == nil {
		hs.Commit = new(commit)
		err = st.writeHardState(hs, true)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestAudit_CorruptWALNeverLosesCommitted: a follower acknowledged an
// entry (it is committed by the leader and that follower, the third node
// being cut off), then its disk damaged that entry's record, the last of
// its log, and its hard state's commit index is one short (written
// unsynced, it never reached the disk). The leader is down. Were the
// follower to take the damaged record for a write a crash cut short and
// start without it, it and the third node would elect a leader that has
// lost a committed, acknowledged grant. It must refuse to start, naming
// the file and the offset; the cluster serves the grant again once the
// old leader is back, and the damaged node, rebuilt empty, recovers
// everything from its peers.
func TestAudit_CorruptWALNeverLosesCommitted(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	li := c.index(l)
	fi, gi := (li+1)%3, (li+2)%3
	grantLocks(t, l, 5)
	waitSame(t, c.live()...)
	c.isolate(gi)
	key, committed := grantToTail(t, l, c.nodes[fi])
	cfgs := make([]Config, 3)
	for i := range c.nodes {
		cfgs[i] = c.nodes[i].cfg
	}
	for i := range c.nodes {
		c.kill(t, i)
	}

	// The damage: the follower's last record (the grant) has a flipped
	// byte in its middle; its commit index is one short.
	name, data := newestSegment(t, cfgs[fi].RaftDir)
	offs, end := recordOffsets(data, segmentFirst(t, name))
	lastIdx := segmentFirst(t, name) + uint64(len(offs)) - 1
	if lastIdx != committed {
		t.Fatalf("the follower's log ends at %d; want the grant's entry %d last", lastIdx, committed)
	}
	last := offs[len(offs)-1]
	data[(last+end)/2] ^= 0x5a
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	setDiskCommit(t, cfgs[fi].RaftDir, committed-1)

	nf, err := restartAt(t, cfgs[fi])
	if err == nil {
		c.nodes[fi] = nf
		c.nodes[gi], err = restartAt(t, cfgs[gi])
		if err != nil {
			t.Fatal(err)
		}
		l2 := c.leaderAmong(t, []*Node{c.nodes[fi], c.nodes[gi]})
		if h, ok := lockHolder(l2, key, time.Now().UnixNano()); !ok || h.OwnerConnID != 99 {
			t.Fatalf("the damaged node started without its last entry (log to %d, commit %d), and %s leads "+
				"without the acknowledged grant at %d", mustLast(nf), committed-1, l2.ID(), committed)
		}
		t.Fatal("the damaged node started, and the grant survived only by chance")
	}
	wantRefusal(t, err, name, fmt.Sprint("byte ", last))

	// Recovery: the old leader and the third node serve the grant; the
	// damaged node, removed and added back empty, catches up from them.
	for _, i := range []int{li, gi} {
		if c.nodes[i], err = restartAt(t, cfgs[i]); err != nil {
			t.Fatalf("restart %s: %v", cfgs[i].NodeID, err)
		}
	}
	l3 := c.leaderAmong(t, []*Node{c.nodes[li], c.nodes[gi]})
	if h, ok := lockHolder(l3, key, time.Now().UnixNano()); !ok || h.OwnerConnID != 99 {
		t.Fatalf("%s leads without the acknowledged grant", l3.ID())
	}
	if err := l3.RemoveServer(ctxT(t, 5*time.Second), cfgs[fi].NodeID); err != nil {
		t.Fatalf("remove the damaged node: %v", err)
	}
	fresh := c.addNode(t)
	waitSame(t, c.nodes[li], c.nodes[gi], fresh)
	if h, ok := lockHolder(fresh, key, time.Now().UnixNano()); !ok || h.OwnerConnID != 99 {
		t.Fatalf("the rebuilt node lacks the grant")
	}
}

func mustGet(t *testing.T, w *WAL, index uint64) walRecord {
	t.Helper()
	r, err := w.Get(index)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustLast(n *Node) uint64 {
	li, _ := n.mem.LastIndex()
	return li
}

// grantToTail has l grant locks, acknowledged, that follower f logs too,
// until the last one's record in f's log ends in a byte that is not zero:
// a whole record with a flipped byte that ends in zeros cannot be told
// from a write a crash cut short (unfinished). It returns the last key
// and its entry's index.
func grantToTail(t *testing.T, l, f *Node) (string, uint64) {
	t.Helper()
	for i := 0; ; i++ {
		key := fmt.Sprint("acked", i)
		out, err := l.Acquire(ctxT(t, 5*time.Second), engine.AcquireReq{Key: []byte(key), Owner: 99, Limit: 1,
			TTL: time.Hour}, nil)
		if err != nil || out.Result != engine.Granted {
			t.Fatalf("acquire: %v, %v", out.Result, err)
		}
		committed := l.FSM().AppliedIndex()
		poll(t, 5*time.Second, "the follower's log", func() bool { return f.st.wal.LastIndex() >= committed })
		if rec := walAppend(nil, mustGet(t, f.st.wal, committed)); rec[len(rec)-2] != 0 || i == 20 {
			return key, committed
		}
	}
}
