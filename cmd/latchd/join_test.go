package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
)

const joinAdminToken = "join-test-admin-token"

// clusterMembers returns GET /v1/admin/cluster's members of the node at
// addr by ID (their suffrage), and the leader's REST address.
func clusterMembers(addr string) (map[string]string, string, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/admin/cluster", nil)
	req.Header.Set("Authorization", "Bearer "+joinAdminToken)
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	var st struct {
		LeaderHTTP string `json:"leader_http_addr"`
		Voters     []struct {
			ID       string `json:"id"`
			Suffrage string `json:"suffrage"`
		} `json:"voters"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, "", err
	}
	m := make(map[string]string, len(st.Voters))
	for _, v := range st.Voters {
		m[v.ID] = v.Suffrage
	}
	return m, st.LeaderHTTP, nil
}

// logLine returns the first line of c's log with every one of subs.
func logLine(c *child, subs ...string) string {
	for _, l := range strings.Split(c.log(), "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			return l
		}
	}
	return ""
}

// TestJoinAsLearner: a node started with --join is added as a learner
// (no vote, so the quorum never waits on it while it catches up), then
// the leader promotes it to a voter on its own once it has caught up.
func TestJoinAsLearner(t *testing.T) {
	dir := t.TempDir()
	ids := []string{"n1", "n2", "n3"}
	raft := map[string]string{}
	var peers []string
	for _, id := range ids {
		raft[id] = freePort(t)
		peers = append(peers, id+"="+raft[id])
	}
	node := func(id string, extra ...string) []string {
		return append([]string{"--raft-dir", dir + "/" + id, "--node-id", id, "--raft-addr", raft[id],
			"--admin-token", joinAdminToken, "--shutdown-timeout", "1"}, extra...)
	}
	var nodes []*child
	for _, id := range ids {
		nodes = append(nodes, startChild(t, 0, true, node(id, "--bootstrap", "--cluster-peers", strings.Join(peers, ","))...))
	}
	var leader *child
	testutil.Eventually(t, 30*time.Second, func() bool {
		_, lh, err := clusterMembers(nodes[0].http)
		for _, n := range nodes {
			if err == nil && n.http == lh {
				leader = n
			}
		}
		return leader != nil
	}, "a leader")
	testutil.Eventually(t, 30*time.Second, func() bool {
		r, err := dialTCP(leader.tcp)
		if err != nil {
			return false
		}
		defer r.Close()
		a, err := r.do("l", "before", "0 60", 2*time.Second)
		return err == nil && strings.HasPrefix(a, "ok ")
	}, "a lock granted by the leader")

	raft["n4"] = freePort(t)
	joins := nodes[0].http + "," + nodes[1].http + "," + nodes[2].http
	n4 := startChild(t, 0, true, node("n4", "--join", joins)...)
	n4.waitLog("joined the cluster as a learner", 30*time.Second)
	testutil.Eventually(t, 30*time.Second, func() bool {
		return logLine(leader, "learner promoted to voter", `"n4"`) != ""
	}, "the leader promotes n4")
	added := logLine(leader, "learner added", `"n4"`)
	if added == "" || strings.Contains(leader.log(), `"voter added"`) {
		t.Fatalf("n4 was not added as a learner first:\n%s", leader.log())
	}
	if i, j := strings.Index(leader.log(), added), strings.Index(leader.log(), logLine(leader, "learner promoted to voter", `"n4"`)); i > j {
		t.Fatal("n4 promoted before it was added as a learner")
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		for _, n := range []*child{leader, n4} {
			m, _, err := clusterMembers(n.http)
			if err != nil || m["n4"] != "voter" || len(m) != 4 {
				return false
			}
		}
		return true
	}, "n4 a voter in the member list, on the leader and on n4")
}
