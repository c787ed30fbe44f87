package server_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2/pkg/netpoll"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
)

// TestRawIdleWaitRule: the idle hold applies with one event loop and two
// or more processors only.
func TestRawIdleWaitRule(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	hold := time.Millisecond
	for _, c := range []struct {
		procs, loops int
		hold, want   time.Duration
	}{
		{2, 1, hold, hold},
		{8, 1, hold, hold},
		{2, 0, hold, hold}, // automatic: one per core but one
		{1, 1, hold, 0},    // the hold would stop the rest of the process
		{1, 0, hold, 0},
		{2, 2, hold, 0}, // several loops: unmeasured, left as upstream gnet
		{8, 0, hold, 0}, // automatic: 7 loops
		{2, 1, 0, 0},    // off
	} {
		runtime.GOMAXPROCS(c.procs)
		cfg := server.DefaultConfig()
		cfg.EventLoops, cfg.LoopIdleHold = c.loops, c.hold
		if got := cfg.RawIdleWait(); got != c.want {
			t.Errorf("GOMAXPROCS %d, EventLoops %d, LoopIdleHold %v: RawIdleWait() = %v, want %v",
				c.procs, c.loops, c.hold, got, c.want)
		}
	}
	if def := server.DefaultConfig().LoopIdleHold; def != time.Millisecond {
		t.Errorf("default LoopIdleHold %v, want 1ms", def)
	}
	for _, bad := range []time.Duration{-time.Millisecond, 2 * time.Second} {
		cfg := server.DefaultConfig()
		cfg.LoopIdleHold = bad
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate accepted LoopIdleHold %v", bad)
		}
	}
}

// TestLoopIdleHoldServes: a server whose one event loop holds its processor
// while idle answers, hands a released lock to its waiter and expires a
// lease, whether the loop is inside its hold or past it.
func TestLoopIdleHoldServes(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("the hold applies with two or more processors")
	}
	defer netpoll.SetRawIdleWait(netpoll.RawIdleWait())
	s := testutil.StartServer(t, func(_ *engine.Config, c *server.Config) {
		c.EventLoops = 1
		c.LoopIdleHold = time.Millisecond
	})
	if got := netpoll.RawIdleWait(); got != time.Millisecond {
		t.Fatalf("netpoll.RawIdleWait() = %v after Start, want 1ms", got)
	}
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	for _, idle := range []time.Duration{0, 300 * time.Microsecond, 20 * time.Millisecond} {
		time.Sleep(idle) // the loop idles inside its hold, or past it
		tok := grant(t, a.do("l", "idle-hold", "5"), "ok")
		b.req("l", "idle-hold", "5") // queued behind a
		b.silent(idle + time.Millisecond)
		time.Sleep(idle)
		if got := a.do("r", "idle-hold", tok); got != "ok" {
			t.Fatalf("idle %v: release: %q", idle, got)
		}
		tok = grant(t, b.line(), "ok") // handed on
		time.Sleep(idle)
		if got := b.do("r", "idle-hold", tok); got != "ok" {
			t.Fatalf("idle %v: waiter's release: %q", idle, got)
		}
	}
	// A lease runs out while no client sends anything: the expiry comes
	// from the clock, not from the loop's I/O.
	grant(t, a.do("l", "idle-lease", "5 1"), "ok")
	b.req("l", "idle-lease", "5")
	grant(t, b.line(), "ok")
}
