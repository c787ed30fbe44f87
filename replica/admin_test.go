package replica

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// wantNotLeader checks err is a *NotLeaderError.
func wantNotLeader(t *testing.T, what string, err error) *NotLeaderError {
	t.Helper()
	var nl *NotLeaderError
	if !errors.Is(err, ErrNotLeader) || !errors.As(err, &nl) {
		t.Fatalf("%s = %v; want a *NotLeaderError", what, err)
	}
	return nl
}

// waitAllLead waits until every node names id as leader, with its client
// address, and has seen more leaders than before (if before is given).
func waitAllLead(t *testing.T, nodes []*Node, id string, before map[*Node]uint64) {
	t.Helper()
	for _, n := range nodes {
		poll(t, 5*time.Second, n.ID()+" naming leader "+id, func() bool {
			s := n.Status()
			return s.LeaderID == id && s.LeaderClientAddr == "client-"+id && s.LeaderChanges > before[n]
		}, func() string { s := n.Status(); return s.LeaderID + " " + s.LeaderClientAddr })
	}
}

func leaderChanges(nodes []*Node) map[*Node]uint64 {
	m := make(map[*Node]uint64)
	for _, n := range nodes {
		m[n] = n.Status().LeaderChanges
	}
	return m
}

func TestAdminNotLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	ctx := ctxT(t, 10*time.Second)
	for _, f := range c.nodes {
		if f == l {
			continue
		}
		wantNotLeader(t, "follower RemoveServer", f.RemoveServer(ctx, l.ID()))
		wantNotLeader(t, "follower AddVoter", f.AddVoter(ctx, "new", "nowhere"))
		wantNotLeader(t, "follower TransferLeadership", f.TransferLeadership(ctx, ""))
		poll(t, 5*time.Second, "a refusal naming the leader", func() bool {
			nl := wantNotLeader(t, "follower TransferLeadership", f.TransferLeadership(ctx, l.ID()))
			return nl.LeaderID == l.ID() && nl.ClientAddr == "client-"+l.ID()
		})
	}
	for _, id := range []string{"nope", l.ID()} {
		if err := l.TransferLeadership(ctx, id); !errors.Is(err, ErrUnknownServer) {
			t.Fatalf("TransferLeadership(%q) = %v; want ErrUnknownServer", id, err)
		}
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.RemoveServer(done, "n1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("RemoveServer with a canceled context = %v", err)
	}
	if err := l.TransferLeadership(done, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("TransferLeadership with a canceled context = %v", err)
	}
	if len(l.Status().Voters) != 3 || !l.IsLeader() {
		t.Fatal("a refused admin call changed the cluster")
	}
}

// TestAdminOps transfers leadership to a named node and to any node, adds
// a node (with no client address anywhere) and makes it leader, so the
// others redirect to the address it announced, and removes a node.
func TestAdminOps(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	ctx := ctxT(t, 20*time.Second)

	var target *Node
	for _, n := range c.nodes {
		if n != l {
			target = n
		}
	}
	before := leaderChanges(c.nodes)
	if err := l.TransferLeadership(ctx, target.ID()); err != nil {
		t.Fatalf("TransferLeadership(%s): %v", target.ID(), err)
	}
	if got := c.leader(t); got != target {
		t.Fatalf("leader after transfer to %s is %s", target.ID(), got.ID())
	}
	waitAllLead(t, c.nodes, target.ID(), before)

	before = leaderChanges(c.nodes)
	if err := target.TransferLeadership(ctx, ""); err != nil {
		t.Fatalf("TransferLeadership(any): %v", err)
	}
	l = c.leader(t)
	if l == target {
		t.Fatalf("%s still leads after transferring to any node", l.ID())
	}
	waitAllLead(t, c.nodes, l.ID(), before)

	// n3 joins with no client address in any config or call; once it
	// leads, the others learn its address from its Restamp entry.
	n3 := c.addNode(t)
	waitSame(t, c.nodes...)
	before = leaderChanges(c.nodes)
	if err := l.TransferLeadership(ctx, n3.ID()); err != nil {
		t.Fatalf("TransferLeadership(n3): %v", err)
	}
	l = c.leader(t)
	if l != n3 {
		t.Fatalf("leader after transfer to n3 is %s", l.ID())
	}
	waitAllLead(t, c.nodes, "n3", before)
	for _, f := range c.nodes[:3] {
		_, err := f.Acquire(ctx, engine.AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1}, nil)
		if nl := wantNotLeader(t, "follower Acquire", err); nl.ClientAddr != "client-n3" || nl.HTTPAddr != "http-n3" {
			t.Fatalf("%s redirects to %q, HTTP %q; want client-n3, http-n3", f.ID(), nl.ClientAddr, nl.HTTPAddr)
		}
	}

	// Remove a follower, stop it, and the other three go on.
	victim := c.nodes[0]
	if err := l.RemoveServer(ctx, victim.ID()); err != nil {
		t.Fatalf("RemoveServer(%s): %v", victim.ID(), err)
	}
	if err := l.RemoveServer(ctx, victim.ID()); err != nil {
		t.Fatalf("RemoveServer(%s) again: %v", victim.ID(), err)
	}
	c.kill(t, 0)
	for _, n := range c.live() {
		poll(t, 5*time.Second, n.ID()+" seeing 3 voters", func() bool {
			var ids []string
			for _, m := range n.Status().Voters {
				ids = append(ids, m.ID)
			}
			slices.Sort(ids)
			return slices.Equal(ids, []string{"n1", "n2", "n3"})
		})
	}
	out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte("after"), Owner: 1, Limit: 1, TTL: time.Minute}, nil)
	if err != nil || out.Result != engine.Granted {
		t.Fatalf("Acquire after the removal = %v, %v", out.Result, err)
	}
	waitSame(t, c.live()...)
}

func TestStatus(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	ctx := ctxT(t, 10*time.Second)
	if _, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte("k"), Owner: 1, Limit: 1, TTL: time.Minute}, nil); err != nil {
		t.Fatal(err)
	}
	waitSame(t, c.nodes...)
	waitAllLead(t, c.nodes, l.ID(), nil)
	var ls Status
	poll(t, 5*time.Second, "followers at the leader's commit index", func() bool {
		ls = l.Status()
		for _, n := range c.nodes {
			if s := n.Status(); s.CommitIndex != ls.CommitIndex || s.AppliedIndex != ls.CommitIndex {
				return false
			}
		}
		return true
	})
	for _, n := range c.nodes {
		s := n.Status()
		role, ready := "follower", false
		if n == l {
			role, ready = "leader", true
		}
		if s.NodeID != n.ID() || s.Role != role || s.Ready != ready {
			t.Fatalf("%s: node %q role %q ready %v; want %q %v", n.ID(), s.NodeID, s.Role, s.Ready, role, ready)
		}
		if s.Term == 0 || s.Term != ls.Term {
			t.Fatalf("%s: term %d; leader's %d", n.ID(), s.Term, ls.Term)
		}
		if s.LastLogIndex < s.CommitIndex || s.AppliedIndex == 0 {
			t.Fatalf("%s: last log %d, commit %d, applied %d", n.ID(), s.LastLogIndex, s.CommitIndex, s.AppliedIndex)
		}
		if s.LeaderClientAddr != "client-"+l.ID() || s.LeaderHTTPAddr != "http-"+l.ID() {
			t.Fatalf("%s: leader client address %q, HTTP address %q", n.ID(), s.LeaderClientAddr, s.LeaderHTTPAddr)
		}
		if s.LeaderRaftAddr != c.raftAddr(c.index(l)) || s.LeaderChanges == 0 {
			t.Fatalf("%s: leader raft address %q, %d leader changes", n.ID(), s.LeaderRaftAddr, s.LeaderChanges)
		}
		if len(s.Voters) != 3 {
			t.Fatalf("%s: voters %+v", n.ID(), s.Voters)
		}
		for j, m := range s.Voters {
			if m.ID != c.nodes[j].ID() || m.RaftAddr != c.raftAddr(j) || m.Suffrage != "voter" {
				t.Fatalf("%s: voter %d is %+v", n.ID(), j, m)
			}
		}
	}

	b, err := json.Marshal(ls)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"applied_index", "batch_wait_timeouts", "batch_waits", "commit_index", "last_log_index",
		"leader_changes", "leader_client_addr", "leader_http_addr", "leader_id", "leader_raft_addr", "node_id",
		"proposed_commands", "proposed_entries", "ready", "role", "snapshot_write_failures", "term", "voters"}
	if !slices.Equal(keys, want) {
		t.Fatalf("JSON keys %v; want %v", keys, want)
	}
	voter := m["voters"].([]any)[0].(map[string]any)
	if _, ok := voter["raft_addr"]; !ok || len(voter) != 3 {
		t.Fatalf("JSON voter %v", voter)
	}

	f := c.nodes[(c.index(l)+1)%3]
	idx := c.index(f)
	c.kill(t, idx)
	if s := f.Status(); s.Role != "shutdown" || s.Ready || len(s.Voters) != 3 {
		t.Fatalf("after Shutdown: %+v", s)
	}
}

// TestAddLearner: a learner gets the log and the state but no vote; then
// AddVoter promotes it.
func TestAddLearner(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	nd, addr := c.startEmpty(t)
	ctx := ctxT(t, 5*time.Second)
	if err := l.AddLearner(ctx, nd.ID(), addr); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	if out, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte("x"), Owner: 1, Limit: 1, TTL: time.Minute}, nil); err != nil || out.Result != engine.Granted {
		t.Fatalf("Acquire = %v, %v", out.Result, err)
	}
	waitSame(t, c.live()...)
	suffrage := func() string {
		for _, m := range l.Status().Voters {
			if m.ID == nd.ID() {
				return m.Suffrage
			}
		}
		return ""
	}
	if s := suffrage(); s != "nonvoter" {
		t.Fatalf("learner's suffrage %q; want nonvoter", s)
	}
	if err := l.AddVoter(ctx, nd.ID(), addr); err != nil {
		t.Fatalf("AddVoter: %v", err)
	}
	if s := suffrage(); s != "voter" {
		t.Fatalf("promoted learner's suffrage %q; want voter", s)
	}
	// Adding it as a learner again (a joining node's retry) is no demotion.
	if err := l.AddLearner(ctx, nd.ID(), addr); err != nil {
		t.Fatalf("AddLearner of a voter: %v", err)
	}
	if s := suffrage(); s != "voter" {
		t.Fatalf("voter added again as a learner: suffrage %q; want voter", s)
	}
	waitSame(t, c.live()...)
}
