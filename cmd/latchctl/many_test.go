package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// latchctl lock K1 K2 -- CMD waits for all the keys, runs CMD with the
// lists of keys, tokens and fences, and releases them all.
func TestLockManyKeys(t *testing.T) {
	t.Parallel()
	s := servertest.StartServer(t)
	ctx := context.Background()
	conn, err := client.Dial(ctx, s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	g, err := conn.Acquire(ctx, "b", 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "env")
	run := start(t, nil, "--addr", s.Addr, "lock", "a", "b", "--timeout", "20", "--",
		"sh", "-c", `printf '%s|%s|%s\n' "$LATCHD_KEY" "$LATCHD_TOKEN" "$LATCHD_FENCE" > "$0"`, out)
	testutil.Eventually(t, 10*time.Second, func() bool {
		info, ok := s.Engine.Inspect(0, "a")
		return ok && info.WaitersTotal == 1 && info.HoldersTotal == 0
	}, "the set queued on a, holding nothing")
	if err := conn.Release(ctx, "b", g.Token); err != nil {
		t.Fatal(err)
	}
	if code := run.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, run.stderr.String())
	}
	env := strings.Split(waitFile(t, out, 5*time.Second), "|")
	toks, fences := strings.Fields(env[1]), strings.Fields(env[2])
	if env[0] != "a b" || len(toks) != 2 || len(fences) != 2 || !strings.HasPrefix(toks[1], fences[1]) || fences[0] == fences[1] {
		t.Fatalf("environment %q", env)
	}
	if holders(s, "a")+holders(s, "b") != 0 {
		t.Fatal("keys still held after CMD exited")
	}
	if code, _, stderr := runCtl(t, nil, 10*time.Second, "--addr", s.Addr, "lock", "a", "a", "--", "true"); code == 0 {
		t.Fatalf("a repeated key ran: %s", stderr)
	}
}
