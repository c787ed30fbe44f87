package httpfast

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
)

// keyHolders returns the owners GET /v1/locks/{key} lists as holding.
func keyHolders(t *testing.T, r resp) []string {
	t.Helper()
	var ks keyState
	if err := json.Unmarshal(r.raw, &ks); err != nil {
		t.Fatalf("key state %s: %v", r.raw, err)
	}
	var owners []string
	for _, h := range ks.Holders {
		owners = append(owners, h.Owner)
	}
	return owners
}

// A single node answers every read route with consistent=true at once; a
// value that is not a boolean is refused.
func TestConsistentReadSingleNode(t *testing.T) {
	h := startHTTP(t, nil)
	for _, path := range []string{"/v1/stats?consistent=true", "/v1/locks/k?consistent=true",
		"/v1/semaphores/k?consistent=true", "/v1/ui/keys?consistent=true", "/v1/stats?consistent=false"} {
		wantStatus(t, path, h.do(call{method: "GET", path: path}), http.StatusOK, "")
	}
	r := h.do(call{method: "GET", path: "/v1/stats?consistent=maybe", invalid: true})
	wantStatus(t, "consistent=maybe", r, http.StatusBadRequest, "bad_request")
}

// On a 3-node cluster a lock taken through the leader is in the answer of
// a consistent read on every follower right away. A node left alone (the
// others stopped) answers a consistent read 503 once its bound passes,
// not from its state.
func TestConsistentReadCluster(t *testing.T) {
	rc := startRESTCluster(t, nil, 90*time.Second)
	lm, lh := rc.leader()
	sid := lh.session()
	for i, key := range []string{"c1", "c2", "c3"} {
		r := lh.do(call{method: "POST", path: "/v1/locks/" + key, session: sid, body: `{"lease_ttl_s":30}`})
		wantStatus(t, "acquire "+key, r, http.StatusOK, "ok")
		owner := keyHolders(t, lh.do(call{method: "GET", path: "/v1/locks/" + key}))
		if len(owner) != 1 {
			t.Fatalf("leader's state of %s: holders %v", key, owner)
		}
		for _, f := range rc.followers(lm) {
			fh := rc.h(f)
			got := keyHolders(t, fh.do(call{method: "GET", path: "/v1/locks/" + key + "?consistent=true"}))
			if len(got) != 1 || got[0] != owner[0] {
				t.Fatalf("%s: consistent read of %s right after the grant: holders %v; want %v", f.ID, key, got, owner)
			}
			r := fh.do(call{method: "GET", path: "/v1/stats?consistent=true"})
			wantStatus(t, f.ID+" consistent stats", r, http.StatusOK, "")
			var st struct {
				Locks []struct{ Key string } `json:"locks"`
			}
			if err := json.Unmarshal(r.raw, &st); err != nil || len(st.Locks) != i+1 {
				t.Fatalf("%s: consistent stats after %d grants: %d locks (%v)", f.ID, i+1, len(st.Locks), err)
			}
		}
	}

	// Leave one follower alone: it must refuse, not answer stale.
	alone := rc.followers(lm)[0]
	for i, m := range rc.c.Members() {
		if m != alone {
			rc.c.Stop(i)
		}
	}
	ah := rc.h(alone)
	r := ah.do(call{method: "GET", path: "/v1/locks/c1?consistent=true"})
	if r.status != http.StatusServiceUnavailable || (r.str("error") != "not_leader" && r.str("error") != "unavailable") {
		t.Fatalf("consistent read on a node alone = %d %s; want 503 not_leader or unavailable", r.status, r.raw)
	}
	// Without consistent it still answers from its own state.
	wantStatus(t, "plain read alone", ah.do(call{method: "GET", path: "/v1/stats"}), http.StatusOK, "")
	testutil.Eventually(t, 30*time.Second, func() bool {
		r := ah.do(call{method: "GET", path: "/v1/stats?consistent=true"})
		return r.status == http.StatusServiceUnavailable && r.str("error") == "not_leader"
	}, "not_leader once the node knows no leader")
}
