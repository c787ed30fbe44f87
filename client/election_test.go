package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// campaign runs e.Campaign in the background and returns its result.
func campaign(ctx context.Context, e *client.Election) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- e.Campaign(ctx) }()
	return errc
}

func wonWithin(t *testing.T, errc <-chan error, d time.Duration, who string) {
	t.Helper()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("%s: Campaign = %v", who, err)
		}
	case <-time.After(d):
		t.Fatalf("%s did not become leader within %v", who, d)
	}
}

func TestElectionHandOver(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	elect := func() *client.Election {
		return &client.Election{Name: "leader", LeaseTTL: 2, Servers: []string{srv.Addr}}
	}
	e1, e2, e3 := elect(), elect(), elect()

	if err := e1.Campaign(ctx); err != nil || !e1.Leading() {
		t.Fatalf("e1: Campaign = %v, Leading %v", err, e1.Leading())
	}
	c2 := campaign(ctx, e2)
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "leader") == 1 }, "e2 queued")
	c3 := campaign(ctx, e3)
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "leader") == 2 }, "e3 queued")
	if e2.Leading() || e3.Leading() {
		t.Fatal("two leaders")
	}

	// Resign: FIFO gives the term to e2, who waited longest.
	if err := e1.Resign(ctx); err != nil || e1.Leading() {
		t.Fatalf("e1: Resign = %v, Leading %v", err, e1.Leading())
	}
	wonWithin(t, c2, 5*time.Second, "e2")
	if e3.Leading() {
		t.Fatal("e3 leads alongside e2")
	}
	if lost(e1.Lost(), 0) {
		t.Fatal("a resignation closed Lost")
	}

	// Death: e2's connection drops; the server releases and e3 takes over,
	// while e2 learns at its next renewal that it was deposed.
	client.KillElection(e2)
	wonWithin(t, c3, 5*time.Second, "e3")
	if !lost(e2.Lost(), 5*time.Second) || e2.Leading() {
		t.Fatalf("e2 still believes it leads (err %v)", e2.Err())
	}
	if e3.Fence() <= e2.Fence() {
		t.Fatalf("e3's term fence %d not above e2's %d", e3.Fence(), e2.Fence())
	}
	if err := e3.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestElectionCampaignCanceled(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	leader := &client.Election{Name: "busy", Servers: []string{srv.Addr}}
	if err := leader.Campaign(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	other := &client.Election{Name: "busy", Servers: []string{srv.Addr}}
	if err := other.Campaign(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign = %v, want context.DeadlineExceeded", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return waitersOn(srv, "busy") == 0 }, "candidate left the queue")
	if err := other.Resign(context.Background()); err != nil {
		t.Fatalf("Resign when not leading = %v, want nil", err)
	}
}
