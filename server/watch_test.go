package server_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// eventFields returns an event line's kind, key, owner kind, holders and
// waiters, failing on any other line.
func eventFields(t *testing.T, line string) string {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 10 || f[0] != "event" || len(f[3]) != 16 {
		t.Fatalf("not an event line: %q", line)
	}
	return strings.Join([]string{f[1], f[2], f[4], f[7], f[8]}, " ")
}

// TestWatchOverTCP: a watching connection gets ok, the key's state, and
// then one event line per change, in order; other connections are
// untouched by it.
func TestWatchOverTCP(t *testing.T) {
	s := servertest.StartServer(t)
	a, b, w := dial(t, s.Addr), dial(t, s.Addr), dial(t, s.Addr)
	tok := grant(t, a.do("l", "k", "0"), "ok")
	if got := w.do("watch", "k", ""); got != "ok" {
		t.Fatalf("watch: %q", got)
	}
	want := func(s string) {
		t.Helper()
		if got := eventFields(t, w.line()); got != s {
			t.Fatalf("event %q, want %q", got, s)
		}
	}
	want("state k conn 1 0")
	want("synced k - 0 0")
	b.req("l", "k", "10")
	want("waiters k - 1 1")
	if got := a.do("r", "k", tok); got != "ok" {
		t.Fatal(got)
	}
	want("released k conn 0 1")
	want("granted k conn 1 0")
	grant(t, b.line(), "ok")
	_ = b.c.Close()
	want("dropped k conn 0 0")
	// A request on the watching connection is not read.
	w.req("l", "x", "0")
	w.silent(50 * time.Millisecond)
}

// TestWatchPrefixOverTCP: watch with "prefix" covers every key under it,
// and a bad argument is a violation.
func TestWatchPrefixOverTCP(t *testing.T) {
	s := servertest.StartServer(t)
	w := dial(t, s.Addr)
	if got := w.do("watch", "job/", "prefix"); got != "ok" {
		t.Fatalf("watch: %q", got)
	}
	if got := eventFields(t, w.line()); got != "synced job/ - 0 0" {
		t.Fatalf("first event %q", got)
	}
	a := dial(t, s.Addr)
	grant(t, a.do("l", "other", "0"), "ok")
	grant(t, a.do("l", "job/1", "0"), "ok")
	if got := eventFields(t, w.line()); got != "granted job/1 conn 1 0" {
		t.Fatalf("event %q", got)
	}
	bad := dial(t, s.Addr)
	if got := bad.do("watch", "k", "everything"); got != "error" {
		t.Fatalf("bad watch argument: %q", got)
	}
	bad.closed()
}

// TestWatchOverflowOverTCP: a watcher that does not read falls behind,
// is cut off with error_watch_overflow as its last line and closed; the
// server goes on.
func TestWatchOverflowOverTCP(t *testing.T) {
	const keys = 40000
	s := servertest.StartServer(t, func(e *engine.Config, _ *server.Config) {
		e.MaxKeys, e.MaxKeysPerOwner = 0, 0
	})
	s.Engine.Hub().SetLimits(engine.HubLimits{Buffer: 64, Total: 1 << 16, Watchers: 1})
	w := dial(t, s.Addr)
	_ = w.c.(*net.TCPConn).SetReadBuffer(4096)
	if got := w.do("watch", "k", "prefix"); got != "ok" {
		t.Fatalf("watch: %q", got)
	}
	if got := dial(t, s.Addr).do("watch", "k", ""); got != "error_max_watchers" {
		t.Fatalf("second watcher over the cap: %q", got)
	}
	// One granted event per key, the watcher reading nothing meanwhile.
	a := dial(t, s.Addr)
	var reqs strings.Builder
	for i := range keys {
		fmt.Fprintf(&reqs, "l\nk%d\n0\n", i)
	}
	done := make(chan error, 1)
	go func() {
		for range keys {
			if _, err := a.br.ReadString('\n'); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	a.send(reqs.String())
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	events := 0
	for {
		line := w.line()
		if line == "error_watch_overflow" {
			break
		}
		eventFields(t, line)
		events++
	}
	w.closed()
	if events >= keys {
		t.Fatalf("%d events before the overflow, of %d", events, keys)
	}
	if got := dial(t, s.Addr).do("watch", "k", ""); got != "ok" {
		t.Fatalf("a new watcher after the cut-off: %q", got)
	}
}
