package server_test

import (
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

func withLockDelay(d time.Duration) servertest.Option {
	return func(e *engine.Config, _ *server.Config) { e.LockDelay = d }
}

// TestLockDelayOverTCP: with --lock-delay, a disconnect holds the key back
// for the delay (the waiter is granted no sooner, with a higher fence), a
// release does not, and delay=<ms> on l sets a grant's own delay.
func TestLockDelayOverTCP(t *testing.T) {
	const delay = 400 * time.Millisecond
	s := servertest.StartServer(t, withLockDelay(delay))
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	first := grant(t, a.do("l", "k", "0"), "ok")
	b.req("l", "k", "10")
	testutil.Eventually(t, 5*time.Second, func() bool {
		l := s.Engine.Snapshot(0).Locks
		return len(l) == 1 && l[0].Waiters == 1
	}, "b queued")
	lost := time.Now()
	_ = a.c.Close()
	testutil.Eventually(t, 5*time.Second, func() bool { return len(s.Engine.Snapshot(0).Delayed) == 1 }, "slot held back")
	if got := dial(t, s.Addr).do("l", "k", "0"); got != "timeout" {
		t.Fatalf("try-lock during the delay: %q", got)
	}
	second := grant(t, b.line(), "ok")
	if waited := time.Since(lost); waited < delay {
		t.Fatalf("granted %v after the disconnect, before the %v delay", waited, delay)
	}
	if f1, f2 := tokenFence(t, first), tokenFence(t, second); f2 <= f1 {
		t.Fatalf("fence did not rise: %s then %s", first, second)
	}
	// A release is voluntary: the next acquire is granted at once.
	if got := b.do("r", "k", second); got != "ok" {
		t.Fatal(got)
	}
	c := dial(t, s.Addr)
	// delay=0: this grant's loss holds nothing back.
	grant(t, c.do("l", "k", "0 30 delay=0"), "ok")
	_ = c.c.Close()
	testutil.Eventually(t, 5*time.Second, func() bool {
		return dial(t, s.Addr).do("l", "k", "0") != "timeout"
	}, "granted at once after a delay=0 holder's disconnect")
	if c, _ := s.Engine.Metrics(); c.Delays != 1 {
		t.Fatalf("lock-delays counted: %d, want 1", c.Delays)
	}
}

// TestLockDelayFieldViolations: delay= is refused where it does not
// belong, and when it is not a non-negative integer.
func TestLockDelayFieldViolations(t *testing.T) {
	s := servertest.StartServer(t)
	for _, tc := range []struct{ cmd, arg string }{
		{"w", "0 delay=5"},
		{"l", "0 delay=-1"},
		{"l", "0 delay=x"},
		{"l", "delay=5"},
	} {
		c := dial(t, s.Addr)
		if got := c.do(tc.cmd, "k", tc.arg); got != "error" {
			t.Errorf("%s %q: got %q, want error", tc.cmd, tc.arg, got)
		}
		c.closed()
	}
	// Where it belongs, the default server (no lock-delay) takes it.
	c := dial(t, s.Addr)
	grant(t, c.do("sl", "s", "0 2 30 delay=1500"), "ok")
	grant(t, c.do("e", "e", "delay=10"), "acquired")
}

func tokenFence(t *testing.T, tok string) uint64 {
	t.Helper()
	x, err := fence.ParseString(tok)
	if err != nil {
		t.Fatal(err)
	}
	return x.Fence
}

// TestLockDelayReadWriteOverTCP: a writer that disconnects holds a
// read-write key back for its own delay=<ms>; readers wait it out.
func TestLockDelayReadWriteOverTCP(t *testing.T) {
	const delay = 300 * time.Millisecond
	s := servertest.StartServer(t)
	w, r := dial(t, s.Addr), dial(t, s.Addr)
	grant(t, w.do("wl", "rw", "0 30 delay=300"), "ok")
	lost := time.Now() // no later than the loss
	_ = w.c.Close()
	testutil.Eventually(t, 5*time.Second, func() bool { return len(s.Engine.Snapshot(0).Delayed) == 1 }, "key held back")
	if got := dial(t, s.Addr).do("rl", "rw", "0"); got != "timeout" {
		t.Fatalf("reader during the delay: %q", got)
	}
	grant(t, r.do("rl", "rw", "10"), "ok")
	if waited := time.Since(lost); waited < delay {
		t.Fatalf("reader granted %v after the loss, before the %v delay", waited, delay)
	}
}
