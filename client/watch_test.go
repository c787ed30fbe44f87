package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/server/servertest"
)

// TestElectionObserve: an observer sees no leader, then each leader in
// turn, as candidates win and resign.
func TestElectionObserve(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders := make(chan client.Leader, 16)
	obsCtx, stopObs := context.WithCancel(ctx)
	obsDone := make(chan error, 1)
	go func() {
		obsDone <- (&client.Election{Name: "e", Servers: []string{srv.Addr}}).Observe(obsCtx, func(l client.Leader) { leaders <- l })
	}()
	next := func() client.Leader {
		t.Helper()
		select {
		case l := <-leaders:
			return l
		case <-ctx.Done():
			t.Fatal("no leader reported")
		}
		return client.Leader{}
	}
	if l := next(); l.Present {
		t.Fatalf("first report %+v, want no leader", l)
	}
	e1 := &client.Election{Name: "e", LeaseTTL: 5, Servers: []string{srv.Addr}}
	if err := e1.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	if l := next(); !l.Present || l.Fence != e1.Fence() || l.OwnerKind != "conn" {
		t.Fatalf("report %+v, want e1 (fence %d)", l, e1.Fence())
	}
	e2 := &client.Election{Name: "e", LeaseTTL: 5, Servers: []string{srv.Addr}}
	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx) }()
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	if l := next(); l.Present {
		t.Fatalf("report %+v, want none between terms", l)
	}
	if l := next(); !l.Present || l.Fence != e2.Fence() {
		t.Fatalf("report %+v, want e2 (fence %d)", l, e2.Fence())
	}
	stopObs()
	if err := <-obsDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("Observe returned %v", err)
	}
}

// TestWaitChange: WaitChange returns at once for a fence that no longer
// holds, and otherwise when its holder lets go.
func TestWaitChange(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := c.Acquire(ctx, "k", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := client.WaitChange(ctx, srv.Addr, "k", g.Fence()-1); err != nil || ev.Kind != "state" || ev.Fence != g.Fence() {
		t.Fatalf("WaitChange on an old fence: %+v, %v", ev, err)
	}
	got := make(chan client.Event, 1)
	go func() {
		ev, err := client.WaitChange(ctx, srv.Addr, "k", g.Fence())
		if err != nil {
			t.Error(err)
		}
		got <- ev
	}()
	select {
	case ev := <-got:
		t.Fatalf("returned while held: %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
	if err := c.Release(ctx, "k", g.Token); err != nil {
		t.Fatal(err)
	}
	if ev := <-got; ev.Kind != "released" || ev.Fence != g.Fence() {
		t.Fatalf("WaitChange = %+v, want the release", ev)
	}
	// A Conn that carries a watch serves nothing else.
	w, err := c.Watch(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := c.Acquire(ctx, "other", 0, 0); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Acquire on a watching Conn: %v", err)
	}
}
