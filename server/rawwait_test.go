package server_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2/pkg/netpoll"
	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// TestRawIdleWaitRule: the raw idle wait applies with one event loop and
// two or more processors only.
func TestRawIdleWaitRule(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		procs, loops int
		on, want     bool
	}{
		{2, 1, true, true},
		{8, 1, true, true},
		{2, 0, true, true},  // automatic: one per core but one
		{1, 1, true, false}, // the raw wait would stop the rest of the process
		{1, 0, true, false},
		{2, 2, true, false}, // several loops: unmeasured, left as upstream gnet
		{8, 0, true, false}, // automatic: 7 loops
		{2, 1, false, false},
	} {
		runtime.GOMAXPROCS(c.procs)
		cfg := server.DefaultConfig()
		cfg.EventLoops, cfg.LoopRawWait = c.loops, c.on
		if got := cfg.RawIdleWait(); got != c.want {
			t.Errorf("GOMAXPROCS %d, EventLoops %d, LoopRawWait %v: RawIdleWait() = %v, want %v",
				c.procs, c.loops, c.on, got, c.want)
		}
	}
	if !server.DefaultConfig().LoopRawWait {
		t.Error("LoopRawWait is off by default")
	}
	runtime.GOMAXPROCS(2)
	cfg := server.DefaultConfig()
	cfg.EventLoops = 1
	for _, c := range []struct {
		godebug string
		want    bool
	}{
		{"", true},
		{"asyncpreemptoff=1", false},
		{"asyncpreemptoff=2", false}, // the runtime: any number but 0
		{"gctrace=1,asyncpreemptoff=1", false},
		{"gctrace=1, asyncpreemptoff=1", true}, // " asyncpreemptoff" is no setting the runtime knows
		{"asyncpreemptoff=1,asyncpreemptoff=0", true},
		{"asyncpreemptoff=1,asyncpreemptoff=x", false}, // a malformed value changes nothing
		{"asyncpreemptoff=0", true},
	} {
		t.Setenv("GODEBUG", c.godebug)
		if got := cfg.RawIdleWait(); got != c.want {
			t.Errorf("GODEBUG=%q: RawIdleWait() = %v, want %v", c.godebug, got, c.want)
		}
	}
}

// TestLoopRawWaitServes: a server whose one event loop keeps its processor
// while idle answers, hands a released lock to its waiter and expires a
// lease, whether the loop is in a raw wait or, idle for longer than the
// runtime's 10 ms preemption, in an ordinary one.
func TestLoopRawWaitServes(t *testing.T) {
	rawWaitTest(t)
	s := servertest.StartServer(t, func(_ *engine.Config, c *server.Config) {
		c.EventLoops = 1
		c.LoopRawWait = true
	})
	if !netpoll.RawIdleWait() {
		t.Fatal("netpoll.RawIdleWait() is off after Start")
	}
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	for _, idle := range []time.Duration{0, 300 * time.Microsecond, 30 * time.Millisecond} {
		time.Sleep(idle) // the loop idles in a raw wait, or past it
		tok := grant(t, a.do("l", "idle-wait", "5"), "ok")
		b.req("l", "idle-wait", "5") // queued behind a
		b.silent(idle + time.Millisecond)
		time.Sleep(idle)
		if got := a.do("r", "idle-wait", tok); got != "ok" {
			t.Fatalf("idle %v: release: %q", idle, got)
		}
		tok = grant(t, b.line(), "ok") // handed on
		time.Sleep(idle)
		if got := b.do("r", "idle-wait", tok); got != "ok" {
			t.Fatalf("idle %v: waiter's release: %q", idle, got)
		}
	}
	// A lease runs out while no client sends anything: the expiry comes
	// from the clock, not from the loop's I/O.
	grant(t, a.do("l", "idle-lease", "5 1"), "ok")
	b.req("l", "idle-lease", "5")
	grant(t, b.line(), "ok")
}

// TestRawIdleWaitProcessWide: the setting is one per process, so it is on
// only while the servers running here have one event loop in all, and
// every one of them wants it.
func TestRawIdleWaitProcessWide(t *testing.T) {
	rawWaitTest(t)
	start := func(on bool) *server.Server {
		c := server.DefaultConfig()
		c.Addr, c.EventLoops, c.LoopRawWait = "127.0.0.1:0", 1, on
		eng, err := engine.New(engine.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		srv, err := server.New(c, backend.NewLocal(eng), zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	stop := func(srv *server.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a := start(true)
	if !netpoll.RawIdleWait() {
		t.Fatal("one server, one loop: raw wait off")
	}
	b := start(true)
	if netpoll.RawIdleWait() {
		t.Fatal("two servers of one loop each: raw wait on")
	}
	stop(b)
	if !netpoll.RawIdleWait() {
		t.Fatal("back to one loop: raw wait off")
	}
	c := start(false)
	if netpoll.RawIdleWait() {
		t.Fatal("a second server with LoopRawWait off: raw wait on")
	}
	stop(c)
	stop(a)
	if netpoll.RawIdleWait() {
		t.Fatal("no server running: raw wait on")
	}
}

// rawWaitTest skips a test where a one-loop server would not use the raw
// wait, and restores the process's setting when the test ends. Call it
// before starting servers: the restore then runs after their Stop, so
// they stop with the raw wait on.
func rawWaitTest(t *testing.T) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.EventLoops = 1
	if !cfg.RawIdleWait() {
		t.Skip("the raw wait applies with two or more processors and the runtime's preemption on")
	}
	was := netpoll.RawIdleWait()
	t.Cleanup(func() { netpoll.SetRawIdleWait(was) })
}
