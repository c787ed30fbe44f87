package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// latchctl observe prints the election's leader, then each change.
func TestObserve(t *testing.T) {
	s := servertest.StartServer(t)
	l := start(t, nil, "--addr", s.Addr, "observe", "jobs", "--count", "3")
	testutil.Eventually(t, 10*time.Second, func() bool { return s.Engine.Hub().Watchers() == 1 }, "observer watching")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := &client.Election{Name: "jobs", Servers: []string{s.Addr}}
	if err := e.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	fence := e.Fence()
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if code := l.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, l.stderr.String())
	}
	got := strings.Split(strings.TrimSpace(l.stdout.String()), "\n")
	if len(got) != 3 || got[0] != "no leader" || !strings.HasPrefix(got[1], "leader fence="+strconv.FormatUint(fence, 10)+" owner=conn:") || got[2] != "no leader" {
		t.Fatalf("observe printed %q", got)
	}
}
