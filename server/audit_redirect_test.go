package server_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testport"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/replica"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// takingOver is a replicated node whose next renewal is refused with a
// not-leader answer naming the node itself, as a leader answers while it
// takes over (its restamp not yet applied) and then serves as leader.
type takingOver struct {
	*replica.Node
	refuse atomic.Bool
}

func (b *takingOver) Submit(r *backend.Request, sink engine.Sink, via engine.Via, l backend.Later) (backend.Reply, bool, error) {
	if r.Op == backend.OpRenew && b.refuse.CompareAndSwap(true, false) {
		return backend.Reply{}, false, &backend.NotLeaderError{Leader: b.LeaderAddrs()}
	}
	return b.Node.Submit(r, sink, via, l)
}

// TestAudit_RedirectedConnectionKeepsGrants: a connection the server has
// sent elsewhere with error_not_leader may be closed by its client, which
// goes on renewing its grants by token on another connection (every
// cluster client that follows redirects does). Its close must not release
// them, even when the node leads again by the time it sees the close: it
// leaves the connection's grants to their leases.
func TestAudit_RedirectedConnectionKeepsGrants(t *testing.T) {
	c := servertest.StartCluster(t, 1, nil)
	m := c.Members()[c.Leader(servertest.LeaderTimeout)]
	be := &takingOver{Node: m.Node}
	scfg := server.DefaultConfig()
	scfg.Addr = testport.Free(t)
	srv, err := server.New(scfg, be, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(t.Context()) })

	holder := dial(t, scfg.Addr)
	tok := grant(t, holder.do("l", "k", "0 30"), "ok")
	if got := holder.do("l", "q", "0 30"); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("second lock: %q", got)
	}
	be.refuse.Store(true)
	if got := holder.do("n", "k", tok+" 30"); !strings.HasPrefix(got, "error_not_leader") {
		t.Fatalf("renew answered %q; want error_not_leader", got)
	}
	_ = holder.c.Close() // the client moves on, by token, to "the leader"
	testutil.Eventually(t, 5*time.Second, func() bool { return srv.Connections() == 0 }, "the server saw the close")
	other := dial(t, scfg.Addr)
	for _, key := range []string{"k", "q"} {
		if got := other.do("l", key, "1 30"); got != "timeout" {
			t.Fatalf("another client's lock on %s: %q while its holder renews it elsewhere; want timeout", key, got)
		}
	}
	// A renewal by token from a new connection keeps k and takes it over.
	if got := other.do("n", "k", tok+" 30"); !strings.HasPrefix(got, "ok") {
		t.Fatalf("renew by token on a new connection: %q", got)
	}
}
