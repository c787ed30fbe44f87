package replica

import (
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/latchd/latchd/engine"
)

func msgApp(to, commit uint64, ents int) *raftpb.Message {
	m := &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(to), Commit: proto.Uint64(commit)}
	for i := range ents {
		m.Entries = append(m.Entries, &raftpb.Entry{Index: proto.Uint64(commit + uint64(i) + 1)})
	}
	return m
}

// TestCommitNoticesWaitForTheNextAppend: while a batch wait is on, a
// commit notice is held (the newest per peer), an append with entries to
// its peer replaces it, and what is left goes out once the wait ends.
func TestCommitNoticesWaitForTheNextAppend(t *testing.T) {
	var ns notices
	if ns.keep(msgApp(2, 5, 0)) {
		t.Fatal("a notice was held with no batch wait on")
	}
	if commitNotice(msgApp(2, 5, 1)) || !commitNotice(msgApp(2, 5, 0)) {
		t.Fatal("commitNotice: only a MsgApp with no entries is one")
	}
	ns.holding.Store(true)
	for _, m := range []*raftpb.Message{msgApp(2, 5, 0), msgApp(3, 5, 0), msgApp(2, 6, 0)} {
		if !ns.keep(m) {
			t.Fatalf("notice to %d not held during a wait", m.GetTo())
		}
	}
	if ms := ns.due(); ms != nil {
		t.Fatalf("due during the wait: %v", ms)
	}
	ns.replaced(msgApp(3, 6, 0)) // no entries: does not carry it in place of the notice
	ns.replaced(msgApp(2, 6, 2)) // an append to 2 carries the commit index
	ns.holding.Store(false)
	ms := ns.due()
	if len(ms) != 1 || ms[0].GetTo() != 3 || ms[0].GetCommit() != 5 {
		t.Fatalf("due after the wait = %v; want the notice to 3 alone", ms)
	}
	if ms := ns.due(); ms != nil || ns.count.Load() != 0 {
		t.Fatalf("due twice: %v (count %d)", ms, ns.count.Load())
	}
	ns.holding.Store(true)
	ns.keep(msgApp(2, 7, 0))
	ns.keep(msgApp(2, 8, 0))
	ns.holding.Store(false)
	if ms := ns.due(); len(ms) != 1 || ms[0].GetCommit() != 8 {
		t.Fatalf("two notices to one peer: due %v; want the newest alone", ms)
	}
}

// TestFollowersLearnCommitsHeldForAWait: a client that locks and unlocks
// in a loop keeps the leader's batch wait on between its commands, so
// commit notices wait for its next entry; once it stops, every follower
// still applies all it committed, and no notice is left held.
func TestFollowersLearnCommitsHeldForAWait(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	ctx := ctxT(t, 30*time.Second)
	const client = engine.OwnerID(7)
	for i := range 50 {
		r, err := l.Propose(ctx, Command{Op: OpAcquire, Owner: client, Key: []byte("k"), Limit: 1, Client: client}, nil)
		if err != nil || r.Outcome.Result != engine.Granted {
			t.Fatalf("acquire %d = %v, %v", i, r.Outcome.Result, err)
		}
		if _, err := l.Propose(ctx, Command{Op: OpRelease, Key: []byte("k"), Token: r.Outcome.Token, Client: client}, nil); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if l.holds.Load() == 0 || l.notices.kept.Load() == 0 {
		t.Fatalf("the leader held its queue %d times and commit notices %d times: the test proves nothing",
			l.holds.Load(), l.notices.kept.Load())
	}
	commit := l.Status().CommitIndex
	for _, n := range c.live() {
		poll(t, 10*time.Second, "every follower applies what the leader committed", func() bool {
			return n.Status().AppliedIndex >= commit
		})
	}
	poll(t, 10*time.Second, "no commit notice left held", func() bool { return l.notices.count.Load() == 0 })
	for _, n := range c.live() {
		poll(t, 10*time.Second, "no apply left counted as under way", func() bool { return n.notices.applying.Load() == 0 })
	}
}
