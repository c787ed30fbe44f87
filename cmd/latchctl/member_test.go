package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/httpfast"
	"github.com/latchd/latchd/internal/testport"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/replica"
	"github.com/latchd/latchd/server/servertest"
)

const testAdminToken = "admin-secret-for-tests"

// startAdminCluster starts a 3-node cluster whose nodes serve REST with
// the admin API.
func startAdminCluster(t *testing.T) *servertest.Cluster {
	t.Helper()
	return servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		// Learners are promoted by hand here (member promote), not by the
		// leader once they catch up.
		Edit: func(cfg *replica.Config) { cfg.LearnerPromoteLag = 0 },
		HTTP: func(tb testing.TB, m *servertest.Member) func(context.Context) error {
			cfg := httpfast.DefaultConfig()
			cfg.Addr = m.HTTPAddr
			srv, err := httpfast.New(cfg, m.Node, zap.NewNop(), httpfast.WithAdmin(m.Node, testAdminToken))
			if err != nil {
				tb.Fatalf("httpfast.New(%s): %v", m.ID, err)
			}
			if err := srv.Start(); err != nil {
				tb.Fatalf("httpfast Start(%s): %v", m.ID, err)
			}
			return srv.Stop
		},
	})
}

// suffrage returns id's suffrage in m's configuration, "" if absent.
func suffrage(m *servertest.Member, id string) string {
	for _, v := range m.Node.Status().Voters {
		if v.ID == id {
			return v.Suffrage
		}
	}
	return ""
}

// everyone waits until every member's configuration gives id want.
func everyone(t *testing.T, c *servertest.Cluster, id, want string) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, func() bool {
		for _, m := range c.Members() {
			if suffrage(m, id) != want {
				return false
			}
		}
		return true
	}, "members do not all see "+id+" as "+want)
}

// startEmpty starts node id with empty storage, not a member of any
// cluster, and returns it with its raft address; it stops when the test
// ends.
func startEmpty(t *testing.T, id string) (*replica.Node, string) {
	t.Helper()
	cfg := servertest.ClusterConfig(id)
	cfg.BindAddr = testport.Free(t)
	cfg.RaftDir = filepath.Join(t.TempDir(), "raft")
	st, err := replica.DiskStorage(cfg, zap.NewNop())
	if err != nil {
		t.Fatalf("DiskStorage(%s): %v", id, err)
	}
	n, err := replica.New(cfg, zap.NewNop(), st)
	if err != nil {
		t.Fatalf("replica.New(%s): %v", id, err)
	}
	t.Cleanup(func() { _ = n.Shutdown() }) // removed from the cluster by then, or the test failed
	return n, cfg.BindAddr
}

// member list, add (a learner), promote, remove and leader transfer, each
// sent to a follower and followed to the leader; a wrong token is refused.
func TestMemberAndLeader(t *testing.T) {
	c := startAdminCluster(t)
	ms := c.Members()
	li := c.Leader(servertest.LeaderTimeout)
	leader, follower := ms[li], ms[(li+1)%3]
	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokenFile, []byte(testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	seeds := "http://" + follower.HTTPAddr
	ctl := func(want int, args ...string) string {
		t.Helper()
		args = append(args, "--admin-token-file", tokenFile, "--http", seeds)
		code, out, errOut := runCtl(t, nil, 60*time.Second, args...)
		if code != want {
			t.Fatalf("latchctl %q exited %d, want %d; stdout:\n%s\nstderr:\n%s", args, code, want, out, errOut)
		}
		return out + errOut
	}

	// list, on a follower: a table, and the node's report as JSON.
	out := ctl(0, "member", "list")
	if !strings.Contains(out, "seen by "+follower.ID+" (follower)") {
		t.Errorf("member list does not say which node answered:\n%s", out)
	}
	for _, m := range ms {
		mark := ""
		if m == leader {
			mark = "  *"
		}
		if !strings.Contains(out, m.ID+"  "+m.RaftAddr+"  voter"+mark) {
			t.Errorf("member list lacks %s (%s, voter%s):\n%s", m.ID, m.RaftAddr, mark, out)
		}
	}
	var st replica.Status
	if err := json.Unmarshal([]byte(ctl(0, "member", "list", "--json")), &st); err != nil {
		t.Fatalf("member list --json: %v", err)
	}
	if st.NodeID != follower.ID || st.LeaderID != leader.ID || len(st.Voters) != 3 {
		t.Errorf("member list --json: node %q leader %q voters %v", st.NodeID, st.LeaderID, st.Voters)
	}

	// add a learner (a node started empty, not yet a member), see it
	// catch up, promote it, remove it.
	n4, raft4 := startEmpty(t, "n4")
	if out := ctl(0, "member", "add", "n4", raft4, "--learner"); !strings.Contains(out, "added n4 as a learner") ||
		!strings.Contains(out, "n4  "+raft4+"  learner") {
		t.Errorf("member add --learner printed:\n%s", out)
	}
	everyone(t, c, "n4", "nonvoter")
	commit := leader.Node.Status().CommitIndex
	testutil.Eventually(t, 20*time.Second, func() bool { return n4.Status().AppliedIndex >= commit },
		"the learner does not catch up")
	// A seed that does not answer is passed over.
	seeds = "127.0.0.1:1," + follower.HTTPAddr
	if out := ctl(0, "member", "promote", "n4"); !strings.Contains(out, "n4  "+raft4+"  voter") {
		t.Errorf("member promote printed:\n%s", out)
	}
	everyone(t, c, "n4", "voter")
	if out := ctl(0, "member", "promote", "n4"); !strings.Contains(out, "voter already") {
		t.Errorf("promoting a voter printed:\n%s", out)
	}
	if out := ctl(0, "member", "remove", "n4"); strings.Contains(out, "n4  ") || !strings.Contains(out, "removed n4") {
		t.Errorf("member remove printed:\n%s", out)
	}
	everyone(t, c, "n4", "")
	if out := ctl(1, "member", "remove", "n4"); !strings.Contains(out, "not_found") {
		t.Errorf("removing a non-member: %s", out)
	}
	if out := ctl(1, "member", "promote", "n9"); !strings.Contains(out, "n9 is not a member") {
		t.Errorf("promoting a non-member: %s", out)
	}

	// transfer leadership to the other follower, named.
	target := ms[(li+2)%3]
	if out := ctl(0, "leader", "transfer", target.ID); !strings.Contains(out, "transferred to "+target.ID) {
		t.Errorf("leader transfer printed:\n%s", out)
	}
	if got := c.Leader(servertest.LeaderTimeout); got != (li+2)%3 {
		t.Errorf("after the transfer to %s the leader is %s", target.ID, ms[got].ID)
	}

	// a wrong token is refused, with the server's error.
	code, _, errOut := runCtl(t, []string{"LATCHD_ADMIN_TOKEN=wrong"}, 30*time.Second,
		"member", "list", "--http", follower.HTTPAddr)
	if code != 1 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "unauthorized") {
		t.Errorf("wrong token: exit %d, stderr %q; want 1 and the server's 401 unauthorized", code, errOut)
	}
}

// Bad command lines of member and leader exit 2 before any request.
func TestMemberUsage(t *testing.T) {
	t.Parallel()
	env := []string{"LATCHD_ADMIN_TOKEN=x", "LATCHD_HTTP=http://127.0.0.1:1"}
	for _, args := range [][]string{
		{"member"},
		{"member", "join"},
		{"member", "add", "n4"},
		{"member", "remove"},
		{"member", "list", "--learner"},
		{"member", "remove", "n4", "--json"},
		{"member", "--http", "ftp://x:1", "list"},
		{"leader"},
		{"leader", "transfer", "a", "b"},
	} {
		if code, _, errOut := runCtl(t, env, 30*time.Second, args...); code != 2 || errOut == "" {
			t.Errorf("latchctl %q exited %d (stderr %q), want 2 and a message", args, code, errOut)
		}
	}
	// No token at all is a bad command line too.
	code, _, errOut := runCtl(t, nil, 30*time.Second, "member", "list")
	if os.Getenv("LATCHD_ADMIN_TOKEN") == "" && (code != 2 || !strings.Contains(errOut, "admin-token-file")) {
		t.Errorf("no token: exit %d, stderr %q", code, errOut)
	}
}
