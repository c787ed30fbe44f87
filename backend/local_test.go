package backend_test

import (
	"errors"
	"testing"
	"time"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
)

// later fails the test if a Local ever answers later.
type later struct{ t *testing.T }

func (l later) Answer(backend.Reply, error) { l.t.Error("Local answered later") }

// sink records the outcomes a parked request hears.
type sink struct{ got []engine.Outcome }

func (s *sink) Deliver(o engine.Outcome) { s.got = append(s.got, o) }

func newLocal(t *testing.T) *backend.Local {
	t.Helper()
	eng, err := engine.New(engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return backend.NewLocal(eng)
}

// TestLocalAnswersAtOnce runs a lock's life through Submit: every call
// answers at once, a queued acquire hears its grant through its Sink, a
// renew's lease comes back in Outcome.TTL, and Request.Now is the time
// the engine sees.
func TestLocalAnswersAtOnce(t *testing.T) {
	b := newLocal(t)
	l := later{t}
	const now = int64(1e18)
	submit := func(r backend.Request, s engine.Sink) (backend.Reply, error) {
		t.Helper()
		r.Now = now
		rep, pending, err := b.Submit(&r, s, nil, l)
		if pending {
			t.Fatalf("Submit(%v) pending; a single node answers at once", r.Op)
		}
		return rep, err
	}
	a, err := submit(backend.Request{Op: backend.OpAcquire, Key: []byte("k"), Owner: 1, Limit: 1, TTL: 10 * time.Second}, nil)
	if err != nil || a.Outcome.Result != engine.Granted {
		t.Fatalf("acquire = %+v, %v; want granted", a, err)
	}
	var w sink
	q, err := submit(backend.Request{Op: backend.OpAcquire, Key: []byte("k"), Owner: 2, Limit: 1,
		TTL: 10 * time.Second, Timeout: time.Minute}, &w)
	if err != nil || q.Outcome.Result != engine.Queued {
		t.Fatalf("second acquire = %+v, %v; want queued", q, err)
	}
	r, err := submit(backend.Request{Op: backend.OpRenew, Key: []byte("k"), Token: a.Outcome.Token,
		TTL: 30 * time.Second, Owner: 1}, nil)
	if err != nil || r.Outcome.TTL != 30*time.Second {
		t.Fatalf("renew = %+v, %v; want a 30s lease in Outcome.TTL", r, err)
	}
	if _, err := submit(backend.Request{Op: backend.OpRelease, Key: []byte("k"), Token: a.Outcome.Token}, nil); err != nil {
		t.Fatalf("release: %v", err)
	}
	if len(w.got) != 1 || w.got[0].Result != engine.Granted {
		t.Fatalf("queued acquire heard %+v; want one grant", w.got)
	}
	if _, err := submit(backend.Request{Op: backend.OpRelease, Key: []byte("k"), Token: a.Outcome.Token}, nil); !errors.Is(err, engine.ErrNotHolder) {
		t.Fatalf("second release: %v; want %v", err, engine.ErrNotHolder)
	}
	if _, g := b.Engine().Metrics(); g.Held != 1 {
		t.Fatalf("engine holds %d leases; want 1 (owner 2's)", g.Held)
	}
}

// TestLocalSessions: OpenSession honours MaxSessions, Begin and Close
// report through Reply.OK, and Do is Submit that waits.
func TestLocalSessions(t *testing.T) {
	b := newLocal(t)
	open := backend.Request{Op: backend.OpOpenSession, Owner: 1 << 63, TTL: time.Minute, MaxSessions: 1, SessionKey: 7}
	if _, err := b.Do(open, nil); err != nil {
		t.Fatalf("open: %v", err)
	}
	open.Owner++
	if _, err := b.Do(open, nil); !errors.Is(err, engine.ErrMaxSessions) {
		t.Fatalf("open past the cap: %v; want %v", err, engine.ErrMaxSessions)
	}
	for _, tt := range []struct {
		name string
		op   backend.Op
		want bool
	}{
		{name: "begin", op: backend.OpBeginSession, want: true},
		{name: "close", op: backend.OpCloseSession, want: true},
		{name: "begin closed", op: backend.OpBeginSession, want: false},
		{name: "close closed", op: backend.OpCloseSession, want: false},
	} {
		rep, err := b.Do(backend.Request{Op: tt.op, Owner: 1 << 63}, nil)
		if err != nil || rep.OK != tt.want {
			t.Errorf("%s = %v, %v; want %v", tt.name, rep.OK, err, tt.want)
		}
	}
	if !b.IsLeader() || b.Replicated() || b.ClusterStatus() != nil || b.Ready() != nil {
		t.Errorf("a single node: leader, not replicated, no cluster status, ready")
	}
}
