package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// rwFence returns the fence number of a token.
func rwFence(t *testing.T, tok string) uint64 {
	t.Helper()
	f, err := fence.ParseString(tok)
	if err != nil {
		t.Fatal(err)
	}
	return f.Fence
}

// rwWaiting returns how many wait on key, per the engine's stats.
func rwWaiting(s *servertest.Server, key string) int {
	for _, l := range s.Engine.Snapshot(0).RWLocks {
		if l.Key == key {
			return l.Waiters
		}
	}
	return -1
}

func TestRWReadersShareWriterWaits(t *testing.T) {
	s := servertest.StartServer(t)
	r1, r2, w, r3 := dial(t, s.Addr), dial(t, s.Addr), dial(t, s.Addr), dial(t, s.Addr)
	t1 := grant(t, r1.do("rl", "k", "0"), "ok")
	t2 := grant(t, r2.do("rl", "k", "0 20"), "ok")
	if got := w.do("wl", "k", "0"); got != "timeout" {
		t.Fatalf("try-write over readers: %q, want timeout", got)
	}
	w.req("wl", "k", "10")
	testutil.Eventually(t, 5*time.Second, func() bool { return rwWaiting(s, "k") == 1 }, "writer queued")
	// A later reader does not overtake the waiting writer.
	r3.req("rl", "k", "10")
	testutil.Eventually(t, 5*time.Second, func() bool { return rwWaiting(s, "k") == 2 }, "reader queued")
	if got := r1.do("rr", "k", t1); got != "ok" {
		t.Fatalf("rr: %q", got)
	}
	w.silent(30 * time.Millisecond)
	if got := r2.do("rn", "k", t2); got != "ok 20" {
		t.Fatalf("rn: %q", got)
	}
	if got := r2.do("rr", "k", t2); got != "ok" {
		t.Fatalf("rr: %q", got)
	}
	tw := grant(t, w.line(), "ok")
	if rwFence(t, tw) <= rwFence(t, t2) {
		t.Fatalf("writer's fence %s not above the readers' %s", tw, t2)
	}
	r3.silent(30 * time.Millisecond)
	if got := w.do("wr", "k", tw); got != "ok" {
		t.Fatalf("wr: %q", got)
	}
	t3 := grant(t, r3.line(), "ok")
	if rwFence(t, t3) <= rwFence(t, tw) {
		t.Fatalf("reader's fence %s not above the writer's %s", t3, tw)
	}
	if got := r3.do("rr", "k", t1); got != "error" {
		t.Fatalf("rr with a released token: %q, want error", got)
	}
}

// TestRWWriterNotStarved keeps the key read-held by a stream of readers
// that overlap; a writer that queued is granted once the readers that
// came before it leave, and every reader after it waits for it.
func TestRWWriterNotStarved(t *testing.T) {
	s := servertest.StartServer(t)
	w := dial(t, s.Addr)
	readers := make([]*client, 6)
	toks := make([]string, len(readers))
	for i := range 2 {
		readers[i] = dial(t, s.Addr)
		toks[i] = grant(t, readers[i].do("rl", "k", "0"), "ok")
	}
	w.req("wl", "k", "10")
	testutil.Eventually(t, 5*time.Second, func() bool { return rwWaiting(s, "k") == 1 }, "writer queued")
	for i := 2; i < len(readers); i++ {
		readers[i] = dial(t, s.Addr)
		readers[i].req("rl", "k", "10")
		testutil.Eventually(t, 5*time.Second, func() bool { return rwWaiting(s, "k") == i }, "reader queued")
	}
	for i := range 2 {
		if got := readers[i].do("rr", "k", toks[i]); got != "ok" {
			t.Fatal(got)
		}
	}
	tw := grant(t, w.line(), "ok")
	for _, r := range readers[2:] {
		r.silent(20 * time.Millisecond)
	}
	if got := w.do("wr", "k", tw); got != "ok" {
		t.Fatal(got)
	}
	// The four readers behind the writer are granted together.
	for _, r := range readers[2:] {
		if f := rwFence(t, grant(t, r.line(), "ok")); f <= rwFence(t, tw) {
			t.Fatalf("reader fence %d not above the writer's %s", f, tw)
		}
	}
}

func TestRWMismatchAndTwoPhase(t *testing.T) {
	s := servertest.StartServer(t)
	a, b := dial(t, s.Addr), dial(t, s.Addr)
	grant(t, a.do("l", "lock", "0"), "ok")
	for _, verb := range []string{"rl", "wl"} {
		if got := b.do(verb, "lock", "0"); got != "error_limit_mismatch" {
			t.Fatalf("%s on a lock key: %q", verb, got)
		}
	}
	grant(t, a.do("rl", "rwk", "0"), "ok")
	if got := b.do("l", "rwk", "0"); got != "error_limit_mismatch" {
		t.Fatalf("l on a read-write key: %q", got)
	}
	if got := b.do("sl", "rwk", "0 3"); got != "error_limit_mismatch" {
		t.Fatalf("sl on a read-write key: %q", got)
	}
	// Two-phase: a reader joins at once; a writer queues until both go.
	grant(t, b.do("re", "rwk", ""), "acquired")
	if got := b.do("re", "rwk", ""); got != "error_already_enqueued" {
		t.Fatalf("second re: %q", got)
	}
	c := dial(t, s.Addr)
	if got := c.do("we", "rwk", "15"); got != "queued" {
		t.Fatalf("we on read-held key: %q", got)
	}
	if got := c.do("ww", "rwk", "0"); got != "timeout" {
		t.Fatalf("ww 0 while readers hold: %q", got)
	}
	if got := c.do("we", "rwk", "15"); got != "queued" {
		t.Fatalf("we again: %q", got)
	}
	c.req("ww", "rwk", "10")
	c.silent(30 * time.Millisecond)
	_ = a.c.Close() // a's reader is released on disconnect
	c.silent(30 * time.Millisecond)
	_ = b.c.Close()
	line := c.line()
	grant(t, line, "ok")
	if !strings.HasSuffix(line, " 15") {
		t.Fatalf("ww grant: %q, want ttl 15", line)
	}
}

// TestRWFIFOOrder queues writer, reader, writer, reader behind a reader:
// each is granted in turn, alone, with a rising fence.
func TestRWFIFOOrder(t *testing.T) {
	s := servertest.StartServer(t)
	first := dial(t, s.Addr)
	tok := grant(t, first.do("rl", "q", "0"), "ok")
	verbs := []string{"wl", "rl", "wl", "rl"}
	cs := make([]*client, len(verbs))
	for i, v := range verbs {
		cs[i] = dial(t, s.Addr)
		cs[i].req(v, "q", "10")
		testutil.Eventually(t, 5*time.Second, func() bool { return rwWaiting(s, "q") == i+1 }, "queued")
	}
	holder, last := first, rwFence(t, tok)
	release := map[string]string{"rl": "rr", "wl": "wr"}
	prev := "rl"
	for i, c := range cs {
		if got := holder.do(release[prev], "q", tok); got != "ok" {
			t.Fatalf("release before %d: %q", i, got)
		}
		tok = grant(t, c.line(), "ok")
		if f := rwFence(t, tok); f <= last {
			t.Fatalf("grant %d: fence %d not above %d", i, f, last)
		} else {
			last = f
		}
		for _, later := range cs[i+1:] {
			later.silent(20 * time.Millisecond)
		}
		holder, prev = c, verbs[i]
	}
}
