package httpfast

import (
	"net/http"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/testutil"
)

// TestClusterStateDigest: GET /v1/admin/state-digest answers, on every
// node, the same digest once they have applied the same index, a
// different one after a change, and needs the admin token.
func TestClusterStateDigest(t *testing.T) {
	rc := startRESTCluster(t, nil, 60*time.Second)
	_, lh := rc.leader()
	admin := []string{"Authorization", "Bearer " + testAdminToken}
	r := lh.do(call{method: "GET", path: "/v1/admin/state-digest", invalid: true})
	if r.status != http.StatusUnauthorized {
		t.Fatalf("state-digest without the admin token = %d %s; want 401", r.status, r.raw)
	}
	// agreed waits until every node reports one index and returns the
	// digest they share there.
	agreed := func() string {
		var digest string
		testutil.Eventually(t, 20*time.Second, func() bool {
			var idx float64
			for i, m := range rc.c.Members() {
				r := rc.h(m).do(call{method: "GET", path: "/v1/admin/state-digest", hdr: admin})
				wantStatus(t, "state-digest", r, http.StatusOK, "")
				d, at := r.str("digest"), r.num("applied_index")
				if len(d) != 64 || at == 0 {
					t.Fatalf("state-digest = %s", r.raw)
				}
				if i == 0 {
					digest, idx = d, at
				} else if at != idx {
					return false
				} else if d != digest {
					t.Fatalf("%s: digest %s at %v; another node's is %s", m.ID, d, at, digest)
				}
			}
			return true
		}, "every node at one applied index")
		return digest
	}
	before := agreed()
	sid := lh.session()
	wantStatus(t, "acquire", lh.do(call{method: "POST", path: "/v1/locks/digest", session: sid}), http.StatusOK, "ok")
	if after := agreed(); after == before {
		t.Fatal("the digest did not change with the state")
	}
}
