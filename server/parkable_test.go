package server_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
)

// lateQueued is a single node whose reply to an acquire that queued is
// held back until release is called, as a replicated leader's reply can
// come after the grant its Sink carried and after the client's next
// requests.
type lateQueued struct {
	*backend.Local
	mu   sync.Mutex
	held []func()
}

func (b *lateQueued) Submit(r *backend.Request, sink engine.Sink, via engine.Via, l backend.Later) (backend.Reply, bool, error) {
	rep, pending, err := b.Local.Submit(r, sink, via, l)
	if r.Op == backend.OpAcquire && !pending && err == nil && rep.Outcome.Result == engine.Queued {
		b.mu.Lock()
		b.held = append(b.held, func() { l.Answer(rep, nil) })
		b.mu.Unlock()
		return backend.Reply{}, true, nil
	}
	return rep, pending, err
}

// release gives the held replies, and reports how many.
func (b *lateQueued) release() int {
	b.mu.Lock()
	held := b.held
	b.held = nil
	b.mu.Unlock()
	for _, f := range held {
		f()
	}
	return len(held)
}

// TestLateQueuedReplyWritesNothing: an acquire's "queued" reply that comes
// after its grant, and after the connection's renew and release were
// answered, writes nothing: the connection's next answer is its own.
func TestLateQueuedReplyWritesNothing(t *testing.T) {
	ecfg := engine.DefaultConfig()
	eng, err := engine.New(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	be := &lateQueued{Local: backend.NewLocal(eng)}
	scfg := server.DefaultConfig()
	scfg.Addr = "127.0.0.1:0"
	srv, err := server.New(scfg, be, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		be.release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
	})
	a, b := dial(t, srv.Addr()), dial(t, srv.Addr())
	tokA := grant(t, a.do("l", "k", "10 30"), "ok")
	b.req("l", "k", "10 30") // queues behind a; its reply is held back
	testutil.Eventually(t, 10*time.Second, func() bool {
		_, g := eng.Metrics()
		return g.Waiting == 1
	}, "b never queued")
	if got := a.do("r", "k", tokA); got != "ok" {
		t.Fatalf("a's release: %q", got)
	}
	tokB := grant(t, b.line(), "ok") // the grant, through the Sink
	if got := b.do("n", "k", tokB+" 30"); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("b's renew: %q", got)
	}
	if got := b.do("r", "k", tokB); got != "ok" {
		t.Fatalf("b's release: %q", got)
	}
	if n := be.release(); n != 1 {
		t.Fatalf("%d replies held, want b's one", n)
	}
	if got := b.do("l", "k", "10 30"); !strings.HasPrefix(got, "ok ") || len(strings.Fields(got)) != 3 {
		t.Fatalf("b's next lock read %q: the late reply wrote a line of its own", got)
	}
}
