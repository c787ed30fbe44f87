package httpfast

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/replica"
	"github.com/latchd/latchd/server/servertest"
)

const (
	testAdminToken  = "admin-s3cret"
	testClientToken = "client-s3cret"
)

// restCluster is a 3-node loopback cluster (testutil) whose members also
// serve the REST API in cluster mode, with the admin API.
type restCluster struct {
	t  *testing.T
	c  *servertest.Cluster
	mu sync.Mutex
	hs map[string]*harness // by member ID
}

// startRESTCluster starts the cluster; mod, if not nil, adjusts every
// REST server's Config. The test fails if it runs past limit.
func startRESTCluster(t *testing.T, mod func(*Config), limit time.Duration) *restCluster {
	t.Helper()
	watchdog(t, limit)
	rc := &restCluster{t: t, hs: make(map[string]*harness)}
	rc.c = servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		HTTP: func(tb testing.TB, m *servertest.Member) func(context.Context) error {
			cfg := DefaultConfig()
			cfg.Addr = m.HTTPAddr
			if mod != nil {
				mod(&cfg)
			}
			srv, err := New(cfg, m.Node, zap.NewNop(), WithAdmin(m.Node, testAdminToken))
			if err != nil {
				tb.Fatalf("New(%s): %v", m.ID, err)
			}
			if err := srv.Start(); err != nil {
				tb.Fatalf("Start(%s): %v", m.ID, err)
			}
			base := "http://" + srv.Addr()
			h := &harness{t: t, srv: srv, base: base, router: openAPIRouter(t, base),
				client: &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
			rc.mu.Lock()
			rc.hs[m.ID] = h
			rc.mu.Unlock()
			return func(ctx context.Context) error {
				h.client.CloseIdleConnections()
				return srv.Stop(ctx)
			}
		},
	})
	return rc
}

// watchdog fails the test with every goroutine's stack if it runs past
// limit: every wait in these tests has its own deadline, this is the
// backstop.
func watchdog(t *testing.T, limit time.Duration) {
	timer := time.AfterFunc(limit, func() { panic(t.Name() + " ran past " + limit.String()) })
	t.Cleanup(func() { timer.Stop() })
}

// leader waits for a leader and returns its member and REST harness.
func (rc *restCluster) leader() (*servertest.Member, *harness) {
	rc.t.Helper()
	m := rc.c.Members()[rc.c.Leader(servertest.LeaderTimeout)]
	return m, rc.h(m)
}

// followers returns the running members that do not lead.
func (rc *restCluster) followers(leader *servertest.Member) []*servertest.Member {
	var fs []*servertest.Member
	for _, m := range rc.c.Members() {
		if m != leader && m.Node != nil {
			fs = append(fs, m)
		}
	}
	return fs
}

func (rc *restCluster) h(m *servertest.Member) *harness {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.hs[m.ID]
}

// counts returns a node's replica's held and waiting counts.
func counts(m *servertest.Member) (held, waiting int) {
	_, g := m.Node.FSM().Engine().Metrics()
	return g.Held, g.Waiting
}

func waitCounts(t *testing.T, m *servertest.Member, held, waiting int) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() bool {
		h, w := counts(m)
		return h == held && w == waiting
	}, "replica held/waiting counts")
}

// TestClusterLocks: on a 3-node cluster a session and a lock go through
// the leader's REST API; a follower answers 503 naming the leader's REST
// address; a TCP client on the leader and an HTTP session share one FIFO
// queue.
func TestClusterLocks(t *testing.T) {
	rc := startRESTCluster(t, nil, 90*time.Second)
	lm, lh := rc.leader()

	// A session and a lock through the leader.
	sid := lh.session()
	r := lh.do(call{method: "POST", path: "/v1/locks/job", session: sid, body: `{"lease_ttl_s":30}`})
	wantStatus(t, "acquire on the leader", r, http.StatusOK, "ok")
	tok := r.str("token")
	wantStatus(t, "renew on the leader", lh.do(call{method: "POST", path: "/v1/locks/job/renew", session: sid,
		body: `{"token":"` + tok + `"}`}), http.StatusOK, "ok")
	wantStatus(t, "keepalive on the leader", lh.do(call{method: "POST", path: "/v1/sessions/" + sid + "/keepalive"}), http.StatusOK, "ok")
	wantStatus(t, "second acquire times out", lh.do(call{method: "POST", path: "/v1/locks/job", session: lh.session()}), http.StatusConflict, "timeout")

	// The grant is replicated, and the session's owner carries the
	// process prefix (bits 32-62) as well as the REST bit.
	for _, m := range rc.c.Members() {
		waitCounts(t, m, 1, 0)
	}
	r = lh.do(call{method: "GET", path: "/v1/stats"})
	wantStatus(t, "stats", r, http.StatusOK, "")
	var st struct {
		Locks []struct {
			Key   string `json:"key"`
			Owner uint64 `json:"owner_conn_id"`
		} `json:"locks"`
		Cluster replica.Status `json:"cluster"`
	}
	if err := json.Unmarshal(r.raw, &st); err != nil {
		t.Fatalf("stats: %v", err)
	}
	if len(st.Locks) != 1 || st.Locks[0].Owner>>63 != 1 || (st.Locks[0].Owner>>32)&0x7fff_ffff == 0 {
		t.Fatalf("locks %+v; want job held by a session owner 1<<63 | prefix<<32 | n", st.Locks)
	}
	if st.Cluster.NodeID != lm.ID || st.Cluster.Role != "leader" || st.Cluster.LeaderHTTPAddr != lm.HTTPAddr {
		t.Fatalf("stats cluster %+v; want the leader %s at %s", st.Cluster, lm.ID, lm.HTTPAddr)
	}

	// Followers refuse every state-changing route, naming the leader's
	// REST address (once they have applied its restamp), and still serve
	// reads.
	for _, f := range rc.followers(lm) {
		fh := rc.h(f)
		testutil.Eventually(t, 30*time.Second, func() bool {
			r := fh.do(call{method: "POST", path: "/v1/sessions"})
			return r.status == http.StatusServiceUnavailable && r.str("error") == "not_leader" && r.str("leader") == lm.HTTPAddr
		}, f.ID+" naming the leader's REST address")
		for _, c := range []call{
			{method: "POST", path: "/v1/locks/job", session: sid},
			{method: "DELETE", path: "/v1/locks/job", session: sid, body: `{"token":"` + tok + `"}`},
			{method: "POST", path: "/v1/semaphores/s/enqueue", session: sid, body: `{"limit":2}`},
			{method: "POST", path: "/v1/sessions/" + sid + "/keepalive"},
			{method: "DELETE", path: "/v1/sessions/" + sid},
		} {
			r := fh.do(c)
			if r.status != http.StatusServiceUnavailable || r.str("error") != "not_leader" || r.str("leader") != lm.HTTPAddr {
				t.Fatalf("%s: %s %s = %d %s; want 503 not_leader naming %s", f.ID, c.method, c.path, r.status, r.raw, lm.HTTPAddr)
			}
		}
		r := fh.do(call{method: "GET", path: "/v1/stats"})
		wantStatus(t, f.ID+" stats", r, http.StatusOK, "")
		var fst struct {
			Cluster replica.Status `json:"cluster"`
		}
		if err := json.Unmarshal(r.raw, &fst); err != nil || fst.Cluster.Role != "follower" || fst.Cluster.LeaderID != lm.ID {
			t.Fatalf("%s stats cluster %+v (%v)", f.ID, fst.Cluster, err)
		}
	}
	wantStatus(t, "release on the leader", lh.do(call{method: "DELETE", path: "/v1/locks/job", session: sid,
		body: `{"token":"` + tok + `"}`}), http.StatusOK, "ok")

	// One FIFO queue for TCP connections and HTTP sessions.
	holder := dialTCP(t, lm.Addr)
	holder.send("l", "shared", "0")
	f := strings.Fields(holder.read())
	if len(f) != 3 || f[0] != "ok" {
		t.Fatalf("tcp l = %q", f)
	}
	tok0, _ := fence.ParseString(f[1])
	waitCounts(t, lm, 1, 0)
	httpWaits := lh.async(call{method: "POST", path: "/v1/locks/shared", session: sid, body: `{"acquire_timeout_s":30}`})
	waitCounts(t, lm, 1, 1)
	tcpWaiter := dialTCP(t, lm.Addr)
	tcpWaiter.send("l", "shared", "30")
	waitCounts(t, lm, 1, 2)
	holder.send("r", "shared", f[1])
	if got := holder.read(); got != "ok" {
		t.Fatalf("tcp r = %q", got)
	}
	r = recv(t, httpWaits, "http waiter")
	wantStatus(t, "the http waiter is first", r, http.StatusOK, "ok")
	tok1, _ := fence.ParseString(r.str("token"))
	waitCounts(t, lm, 1, 1) // the TCP waiter still waits
	wantStatus(t, "http releases", lh.do(call{method: "DELETE", path: "/v1/locks/shared", session: sid,
		body: `{"token":"` + r.str("token") + `"}`}), http.StatusOK, "ok")
	line := tcpWaiter.read()
	f = strings.Fields(line)
	if len(f) != 3 || f[0] != "ok" {
		t.Fatalf("tcp waiter got %q; want ok <token> <ttl>", line)
	}
	tok2, _ := fence.ParseString(f[1])
	if tok0.Compare(tok1) >= 0 || tok1.Compare(tok2) >= 0 {
		t.Fatalf("fences %d, %d, %d not increasing in grant order", tok0.Fence, tok1.Fence, tok2.Fence)
	}

	// Deleting the session releases through the log on every node.
	r = lh.do(call{method: "POST", path: "/v1/locks/other", session: sid})
	wantStatus(t, "acquire other", r, http.StatusOK, "ok")
	wantStatus(t, "delete session", lh.do(call{method: "DELETE", path: "/v1/sessions/" + sid}), http.StatusOK, "ok")
	wantStatus(t, "deleted session", lh.do(call{method: "POST", path: "/v1/locks/other", session: sid}), http.StatusGone, "session_gone")
	for _, m := range rc.c.Members() {
		waitCounts(t, m, 1, 0) // the TCP waiter's grant only
	}
}

// TestClusterAdmin: the admin API on a 3-node cluster: status on a
// follower, tokens, bad requests, a leadership transfer and a removal.
func TestClusterAdmin(t *testing.T) {
	rc := startRESTCluster(t, func(c *Config) { c.AuthToken = testClientToken }, 90*time.Second)
	lm, lh := rc.leader()
	admin := []string{"Authorization", "Bearer " + testAdminToken}
	client := []string{"Authorization", "Bearer " + testClientToken}
	fm := rc.followers(lm)[0]
	fh := rc.h(fm)

	// Status on a follower, once it has applied the leader's restamp.
	var st replica.Status
	testutil.Eventually(t, 30*time.Second, func() bool {
		r := fh.do(call{method: "GET", path: "/v1/admin/cluster", hdr: admin})
		wantStatus(t, "GET cluster on a follower", r, http.StatusOK, "")
		st = replica.Status{}
		if err := json.Unmarshal(r.raw, &st); err != nil {
			t.Fatalf("status: %v", err)
		}
		return st.LeaderHTTPAddr == lm.HTTPAddr
	}, "the follower naming the leader's REST address")
	if st.NodeID != fm.ID || st.Role != "follower" || st.LeaderID != lm.ID || st.LeaderClientAddr != lm.Addr || len(st.Voters) != 3 {
		t.Fatalf("follower status %+v", st)
	}

	// Tokens: the admin routes take the admin token only, and the client
	// routes the client token only.
	for _, c := range []call{
		{method: "GET", path: "/v1/admin/cluster"},
		{method: "GET", path: "/v1/admin/cluster", hdr: client},
		{method: "GET", path: "/v1/admin/cluster", hdr: []string{"Authorization", "Bearer " + testAdminToken + "x"}},
		{method: "POST", path: "/v1/admin/voters", body: `{"id":"x","raft_addr":"127.0.0.1:1"}`, hdr: client},
		{method: "DELETE", path: "/v1/admin/voters/" + fm.ID},
		{method: "POST", path: "/v1/admin/leadership-transfer", hdr: client},
		{method: "GET", path: "/v1/stats", hdr: admin},
	} {
		c.invalid = true
		r := lh.do(c)
		if r.status != http.StatusUnauthorized || r.str("error") != "unauthorized" {
			t.Fatalf("%s %s with %v = %d %s; want 401", c.method, c.path, c.hdr, r.status, r.raw)
		}
	}
	wantStatus(t, "stats with the client token", lh.do(call{method: "GET", path: "/v1/stats", hdr: client}), http.StatusOK, "")

	// Followers refuse the changes, naming the leader.
	for _, c := range []call{
		{method: "POST", path: "/v1/admin/voters", body: `{"id":"n9","raft_addr":"127.0.0.1:1"}`},
		{method: "DELETE", path: "/v1/admin/voters/" + fm.ID},
		{method: "POST", path: "/v1/admin/leadership-transfer"},
	} {
		c.hdr = admin
		r := fh.do(c)
		if r.status != http.StatusServiceUnavailable || r.str("error") != "not_leader" || r.str("leader") != lm.HTTPAddr {
			t.Fatalf("follower %s %s = %d %s; want 503 not_leader naming %s", c.method, c.path, r.status, r.raw, lm.HTTPAddr)
		}
	}

	// Bad requests and unknown voters.
	for _, c := range []struct {
		call
		status int
		code   string
	}{
		{call{method: "POST", path: "/v1/admin/voters", body: `{"id":`, invalid: true}, 400, "bad_request"},
		{call{method: "POST", path: "/v1/admin/voters", body: `{"id":"n9"}`, invalid: true}, 400, "bad_request"},
		{call{method: "POST", path: "/v1/admin/voters", body: `{"raft_addr":"127.0.0.1:1"}`, invalid: true}, 400, "bad_request"},
		{call{method: "POST", path: "/v1/admin/voters", body: `{"id":7,"raft_addr":"127.0.0.1:1"}`, invalid: true}, 400, "bad_request"},
		{call{method: "POST", path: "/v1/admin/leadership-transfer", body: `[]`, invalid: true}, 400, "bad_request"},
		{call{method: "DELETE", path: "/v1/admin/voters/nobody"}, 404, "not_found"},
		{call{method: "POST", path: "/v1/admin/leadership-transfer", body: `{"id":"nobody"}`}, 404, "not_found"},
		{call{method: "GET", path: "/v1/admin/voters", invalid: true}, 405, "method_not_allowed"},
	} {
		c.hdr = admin
		wantStatus(t, c.method+" "+c.path+" "+c.body, lh.do(c.call), c.status, c.code)
	}

	// Adding a member again (as latchd --join does on a restart, with its
	// client_addr, which is ignored) changes nothing: 200, not 201.
	r := lh.do(call{method: "POST", path: "/v1/admin/voters", hdr: admin,
		body: `{"id":"` + fm.ID + `","raft_addr":"` + fm.RaftAddr + `","client_addr":"` + fm.Addr + `"}`})
	wantStatus(t, "re-add a member", r, http.StatusOK, "ok")
	if v, _ := r.body["voters"].([]any); len(v) != 3 {
		t.Fatalf("re-add answered voters %s", r.raw)
	}

	// A learner (a node that is not even running here) joins without a
	// vote: the three voters keep their quorum and the leader keeps
	// taking commands; then it is removed again.
	r = lh.do(call{method: "POST", path: "/v1/admin/voters", hdr: admin, body: `{"id":"l9","raft_addr":"127.0.0.1:1","learner":true}`})
	wantStatus(t, "add a learner", r, http.StatusCreated, "ok")
	if !strings.Contains(string(r.raw), `{"id":"l9","raft_addr":"127.0.0.1:1","suffrage":"nonvoter"}`) {
		t.Fatalf("add learner answered %s", r.raw)
	}
	lsid := lh.do(call{method: "POST", path: "/v1/sessions", hdr: client}).str("session_id")
	wantStatus(t, "acquire with a learner", lh.do(call{method: "POST", path: "/v1/locks/learner", session: lsid, hdr: client}), http.StatusOK, "ok")
	wantStatus(t, "remove the learner", lh.do(call{method: "DELETE", path: "/v1/admin/voters/l9", hdr: admin}), http.StatusOK, "ok")

	// Transfer leadership to any other voter: the leader changes.
	wantStatus(t, "transfer leadership", lh.do(call{method: "POST", path: "/v1/admin/leadership-transfer", hdr: admin}), http.StatusOK, "ok")
	var nm *servertest.Member
	testutil.Eventually(t, 30*time.Second, func() bool {
		for _, m := range rc.c.Members() {
			if m != lm && m.Node.IsLeader() {
				nm = m
				return true
			}
		}
		return false
	}, "a new leader after the transfer")
	nh := rc.h(nm)
	testutil.Eventually(t, 30*time.Second, func() bool {
		r := lh.do(call{method: "GET", path: "/v1/admin/cluster", hdr: admin})
		return r.str("role") == "follower" && r.str("leader_id") == nm.ID && r.str("leader_http_addr") == nm.HTTPAddr
	}, "the old leader naming the new one")

	// Remove the old leader through the new one: it leaves the
	// configuration.
	r = nh.do(call{method: "DELETE", path: "/v1/admin/voters/" + lm.ID, hdr: admin})
	wantStatus(t, "remove the old leader", r, http.StatusOK, "ok")
	voters := func(r resp) []string {
		var ids []string
		v, _ := r.body["voters"].([]any)
		for _, m := range v {
			ids = append(ids, m.(map[string]any)["id"].(string))
		}
		return ids
	}
	if ids := voters(r); len(ids) != 2 || strings.Contains(strings.Join(ids, ","), lm.ID) {
		t.Fatalf("voters after removing %s: %v", lm.ID, ids)
	}
	for i, m := range rc.c.Members() {
		if m == lm {
			rc.c.Stop(i) // removed: it must not call elections at the others
		}
	}
	for _, m := range rc.c.Members() {
		if m == lm {
			continue
		}
		testutil.Eventually(t, 30*time.Second, func() bool {
			r := rc.h(m).do(call{method: "GET", path: "/v1/admin/cluster", hdr: admin})
			ids := voters(r)
			return len(ids) == 2 && !strings.Contains(strings.Join(ids, ","), lm.ID)
		}, m.ID+" seeing "+lm.ID+" leave the configuration")
	}
	// The two left still take requests.
	sid := nh.do(call{method: "POST", path: "/v1/sessions", hdr: client}).str("session_id")
	wantStatus(t, "acquire after the removal", nh.do(call{method: "POST", path: "/v1/locks/after", session: sid, hdr: client}), http.StatusOK, "ok")
}

// TestAdminAbsentWithoutWithAdmin: without WithAdmin the admin routes do
// not exist, whatever the token.
func TestAdminAbsentWithoutWithAdmin(t *testing.T) {
	h := startHTTP(t, nil)
	for _, c := range []call{
		{method: "GET", path: "/v1/admin/cluster"},
		{method: "GET", path: "/v1/admin/cluster", hdr: []string{"Authorization", "Bearer " + testAdminToken}},
		{method: "POST", path: "/v1/admin/voters", body: `{"id":"n9","raft_addr":"127.0.0.1:1"}`},
		{method: "DELETE", path: "/v1/admin/voters/n1"},
		{method: "POST", path: "/v1/admin/leadership-transfer"},
	} {
		wantStatus(t, c.method+" "+c.path, h.do(c), http.StatusNotFound, "not_found")
	}
	if _, err := New(DefaultConfig(), backend.NewLocal(h.ts.Engine), zap.NewNop(), WithAdmin(nil, "x")); err == nil {
		t.Fatal("New accepted WithAdmin without a node")
	}
}

// TestClusterSessionCapAndStop: the session cap counts the replica's
// sessions; stopping a leader's REST server withdraws its parked
// requests through the log (503 unavailable) and leaves its sessions'
// grants held.
func TestClusterSessionCapAndStop(t *testing.T) {
	rc := startRESTCluster(t, func(c *Config) { c.MaxSessions = 2 }, 90*time.Second)
	lm, lh := rc.leader()
	a, b := lh.session(), lh.session()
	wantStatus(t, "third session", lh.do(call{method: "POST", path: "/v1/sessions"}), http.StatusTooManyRequests, "max_sessions")

	wantStatus(t, "a holds", lh.do(call{method: "POST", path: "/v1/locks/k", session: a}), http.StatusOK, "ok")
	bWaits := lh.async(call{method: "POST", path: "/v1/locks/k", session: b, body: `{"acquire_timeout_s":60}`})
	waitCounts(t, lm, 1, 1)
	waitParked(t, lh, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lh.srv.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	wantStatus(t, "parked at Stop", recv(t, bWaits, "parked request"), http.StatusServiceUnavailable, "unavailable")
	for _, m := range rc.c.Members() {
		waitCounts(t, m, 1, 0) // a's grant stays; b's wait is withdrawn
		if n := m.Node.FSM().Engine().Sessions(); n != 2 {
			t.Fatalf("%s holds %d sessions after the REST server stopped; want 2 (they expire on the leader)", m.ID, n)
		}
	}
}

// TestClusterSessionSurvivesFailover: a session opened on one leader keeps
// working on the next: its id carries a key the replicated state holds, so
// the new leader's REST server takes an id it never issued, and refuses
// the same owner with another key.
func TestClusterSessionSurvivesFailover(t *testing.T) {
	rc := startRESTCluster(t, nil, 90*time.Second)
	lm, lh := rc.leader()
	sid := lh.session()
	r := lh.do(call{method: "POST", path: "/v1/locks/job", session: sid, body: `{"lease_ttl_s":60}`})
	wantStatus(t, "acquire on the first leader", r, http.StatusOK, "ok")
	tok := r.str("token")
	for _, m := range rc.c.Members() {
		waitCounts(t, m, 1, 0)
	}

	// A follower knows the session from the log: it answers not_leader
	// for it, not session_gone.
	fh := rc.h(rc.followers(lm)[0])
	testutil.Eventually(t, 30*time.Second, func() bool {
		r := fh.do(call{method: "POST", path: "/v1/sessions/" + sid + "/keepalive"})
		return r.status == http.StatusServiceUnavailable && r.str("error") == "not_leader"
	}, "a follower naming the leader for the session")

	for i, m := range rc.c.Members() {
		if m == lm {
			rc.c.Stop(i)
		}
	}
	nm, nh := rc.leader()
	if nm == lm {
		t.Fatal("the stopped member still leads")
	}
	forged := sid[:16] + strings.Repeat("0", 15) + "1"
	if forged == sid {
		forged = sid[:16] + strings.Repeat("0", 15) + "2"
	}
	wantStatus(t, "same owner, another key", nh.do(call{method: "POST", path: "/v1/sessions/" + forged + "/keepalive"}),
		http.StatusGone, "session_gone")
	wantStatus(t, "keepalive on the new leader", nh.do(call{method: "POST", path: "/v1/sessions/" + sid + "/keepalive"}),
		http.StatusOK, "ok")
	wantStatus(t, "renew on the new leader", nh.do(call{method: "POST", path: "/v1/locks/job/renew", session: sid,
		body: `{"token":"` + tok + `"}`}), http.StatusOK, "ok")
	wantStatus(t, "another lock on the new leader", nh.do(call{method: "POST", path: "/v1/locks/other", session: sid}),
		http.StatusOK, "ok")
	wantStatus(t, "release on the new leader", nh.do(call{method: "DELETE", path: "/v1/locks/job", session: sid,
		body: `{"token":"` + tok + `"}`}), http.StatusOK, "ok")
	waitCounts(t, nm, 1, 0)
	// Deleting it there drops what it still held.
	wantStatus(t, "delete on the new leader", nh.do(call{method: "DELETE", path: "/v1/sessions/" + sid}), http.StatusOK, "ok")
	waitCounts(t, nm, 0, 0)
	wantStatus(t, "deleted session", nh.do(call{method: "POST", path: "/v1/locks/job", session: sid}),
		http.StatusGone, "session_gone")
}
