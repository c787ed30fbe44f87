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

// closedNow reports whether ch is closed, without waiting.
func closedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// slowGrants answers acquires after delay, everything else at once.
func slowGrants(tbl *fakeTable, delay time.Duration) func(cmd, key, arg string) string {
	return func(cmd, key, arg string) string {
		if cmd == "l" {
			time.Sleep(delay)
		}
		return tbl.serve(cmd, key, arg)
	}
}

// The lease's local end runs from when the acquire was sent, not from when
// the grant arrived, and Held looks at the clock, not only at Lost.
func TestLeaseEndMeasuredFromSend(t *testing.T) {
	t.Parallel()
	tbl := newFakeTable()
	srv := newFakeNode(t, slowGrants(tbl, 700*time.Millisecond))
	l := &client.Lock{Key: "k", LeaseTTL: 2, Servers: []string{srv.Addr}}
	// A paused process: the renewal does not even start until the test
	// lets it, well after the lease is over.
	resume := make(chan struct{})
	t.Cleanup(func() { close(resume) })
	client.SetRenewHook(l, func(ctx context.Context) { <-ctx.Done(); <-resume })

	start := time.Now()
	if got, err := l.Acquire(context.Background()); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	returned := time.Now()
	if !l.Held() {
		t.Fatal("not Held right after the grant")
	}
	// The server answers 700 ms after the acquire reached it, so the send
	// was at least 700 ms before Acquire returned: measured from the send
	// the lease ends by returned+1.3s; measured from the grant's arrival
	// it would end 2 s after the arrival, 700 ms later. (Bounds on the
	// clock, not on how fast a loaded machine polls.)
	if end := client.LeaseEnd(l); end.Before(start.Add(2*time.Second)) || end.After(returned.Add(1300*time.Millisecond)) {
		t.Fatalf("lease ends %v after the acquire was sent (Acquire took %v); want the TTL (2s) from the send",
			end.Sub(start), returned.Sub(start))
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return !l.Held() }, "Held turns false")
	if d := time.Since(start); d < 2*time.Second {
		t.Fatalf("Held turned false %v after the acquire was sent; want no sooner than the 2s TTL", d)
	}
	if closedNow(l.Lost()) {
		t.Fatal("Lost closed while the renewal is still blocked: Held must look at the clock itself")
	}
	if srv.count("n") != 0 {
		t.Fatalf("%d renewals sent by a paused process", srv.count("n"))
	}
}

// A grant that arrives with less than half its TTL left, measured from the
// send, is renewed before Acquire returns.
func TestLeaseLateGrantRenewedAtOnce(t *testing.T) {
	t.Parallel()
	tbl := newFakeTable()
	srv := newFakeNode(t, slowGrants(tbl, 1200*time.Millisecond))
	l := &client.Lock{Key: "k", LeaseTTL: 2, Servers: []string{srv.Addr}}
	if got, err := l.Acquire(context.Background()); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	if srv.count("n") != 1 || !l.Held() {
		t.Fatalf("renewals %d, Held %v; want the late grant renewed once and held", srv.count("n"), l.Held())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	// If that renewal fails, Acquire reports the grant lost.
	srv.setHandler(func(cmd, key, arg string) string {
		if cmd == "n" {
			return "error"
		}
		return slowGrants(tbl, 1200*time.Millisecond)(cmd, key, arg)
	})
	if got, err := l.Acquire(context.Background()); got || !errors.Is(err, client.ErrLost) || !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("Acquire = %v, %v; want false, ErrLost wrapping ErrNotHolder", got, err)
	}
	if l.Held() || l.Token() != "" {
		t.Fatal("a dropped late grant is reported held")
	}
}

// Regression: a lease lost while Release stopped its renewer used to leave
// the closed Lost channel in place, and the next grant of the same Lock
// started out lost.
func TestLeaseLostDuringReleaseNotInherited(t *testing.T) {
	t.Parallel()
	srv := servertest.StartServer(t)
	ctx := context.Background()
	l := &client.Lock{Key: "k", LeaseTTL: 1, Servers: []string{srv.Addr}}
	renewing := make(chan struct{}, 1)
	// The renewal blocks until the lease's local end, then fails.
	client.SetRenewHook(l, func(ctx context.Context) {
		select {
		case renewing <- struct{}{}:
		default:
		}
		<-ctx.Done()
	})
	if got, err := l.Acquire(ctx); !got || err != nil {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	select {
	case <-renewing:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal started")
	}
	// Release stops the renewer mid-renewal; the renewal fails meanwhile.
	if err := l.Release(ctx); !errors.Is(err, client.ErrLost) {
		t.Fatalf("Release = %v, want ErrLost (lost while releasing)", err)
	}
	client.SetRenewHook(l, nil)
	// The lost grant was let go by closing its connection, which the
	// server may not have seen yet: wait in the queue, not a bare try.
	l.AcquireTimeout = 10 * time.Second
	if got, err := l.Acquire(ctx); !got || err != nil {
		t.Fatalf("second Acquire = %v, %v", got, err)
	}
	closed, held, why := closedNow(l.Lost()), l.Held(), l.Err()
	err := l.Release(ctx) // stops the renewer before the test can end
	if closed || !held || why != nil {
		t.Fatalf("new grant: Lost closed %v, Held %v, Err %v; want a fresh, held grant", closed, held, why)
	}
	if err != nil {
		t.Fatalf("Release of the new grant: %v", err)
	}
}
