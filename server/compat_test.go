package server_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/testport"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// The compatibility suite: exchanges over the wire whose answers are
// dflockd v1.10's, pinned so that a change in latchd that breaks a dflockd
// client fails here. Every case in compatCases answers the same on
// dflockd v1.10; to check that, point COMPAT_DFLOCKD_BIN at a dflockd
// binary and run
//
//	COMPAT_DFLOCKD_BIN=/path/to/dflockd go test -run TestCompat ./server/
//
// which runs compatCases against it (and skips deliberateCases, the places
// latchd differs on purpose: docs/compat.md; with COMPAT_DELIBERATE=1 it
// runs them too, and each fails with dflockd's answer).
//
// A case is a script, one step per line:
//
//	N> cmd key arg -> want    request on connection N, then its answer
//	N> cmd key arg &          request whose answer is read later
//	N>~ cmd key arg -> want   repeat the request until the answer matches (3 s)
//	N< want                   read a pending answer
//	N< silent                 no answer within 100 ms
//	N! raw -> want            raw bytes, then an answer
//	N close | N closed        close; the server has closed it
//	sleep D                   a time.Duration
//
// In want, $x is a token (bound at first sight, compared after), * any
// word, {stats} the stats JSON. In requests, $x is the token bound to x.

type compatCfg struct {
	maxWaiters, maxLocks, maxConns int
	auth                           string
	// noSweep: on dflockd, a sweep interval that never fires during the
	// case, so a lapsed lease is found by the wait, not the sweep.
	noSweep bool
	// own: a server of its own (the case counts connections or keys);
	// otherwise cases of one configuration share a latchd server, each
	// with its keys prefixed.
	own bool
}

type compatCase struct {
	name  string
	cfg   compatCfg
	steps []string
}

var compatCases = []compatCase{
	{name: "lock release", steps: []string{
		"1> l k 10 -> ok $a 33",
		"1> r k $a -> ok",
		"1> r k $a -> error",
	}},
	{name: "lock custom lease", steps: []string{"1> l k 10 5 -> ok $a 5"}},
	{name: "try-lock held key", steps: []string{
		"1> l k 10 -> ok $a 33",
		"2> l k 0 -> timeout",
		"2> l k 1 -> timeout",
	}},
	{name: "release wrong token or key", steps: []string{
		"1> l k 10 -> ok $a 33",
		"1> r k 00000000000000000000000000000000 -> error",
		"1> r other $a -> error",
		"1> n k 00000000000000000000000000000000 -> error",
	}},
	{name: "renew", steps: []string{
		"1> l k 10 -> ok $a 33",
		"1> n k $a -> ok 33",
		"1> n k $a 60 -> ok 60",
		"2> n k $a 7 -> ok 7", // any connection with the token
	}},
	{name: "fifo hand-off", steps: []string{
		"1> l k 10 -> ok $a 33",
		"2> l k 10 &",
		"2< silent",
		"3> l k 10 &",
		"1> r k $a -> ok",
		"2< ok $b 33",
		"3< silent",
		"2> r k $b -> ok",
		"3< ok $c 33",
	}},
	{name: "disconnect releases", steps: []string{
		"1> l k 10 -> ok $a 33",
		"1 close",
		"2>~ l k 0 -> ok $b 33",
	}},
	{name: "disconnect releases semaphore slot", steps: []string{
		"1> sl s 10 1 -> ok $a 33",
		"1 close",
		"2>~ sl s 0 1 -> ok $b 33",
	}},
	{name: "enqueue free key then wait", steps: []string{
		"1> e k -> acquired $a 33",
		"1> w k 1 -> ok $a 33",
		"1> w k 1 -> error_not_enqueued",
	}},
	{name: "enqueue custom lease", steps: []string{
		"1> e k 7 -> acquired $a 7",
		"1> w k 1 -> ok $a 7",
	}},
	{name: "enqueue twice", steps: []string{
		"1> e k -> acquired $a 33",
		"1> e k -> error_already_enqueued",
	}},
	{name: "semaphore enqueue twice", steps: []string{
		"1> se s 3 -> acquired $a 33",
		"1> se s 3 -> error_already_enqueued",
	}},
	{name: "queued enqueue twice", steps: []string{
		"1> l k 10 -> ok $a 33",
		"2> e k -> queued",
		"2> e k -> error_already_enqueued",
	}},
	{name: "wait without enqueue", steps: []string{
		"1> w k 1 -> error_not_enqueued",
		"1> sw s 1 -> error_not_enqueued",
	}},
	{name: "wait after a lock grant", steps: []string{
		"1> l k 10 -> ok $a 33",
		"1> w k 0 -> error_not_enqueued",
	}},
	{name: "another connection's enqueue", steps: []string{
		"1> e k -> acquired $a 33",
		"2> w k 0 -> error_not_enqueued",
	}},
	{name: "two-phase queued then granted", steps: []string{
		"1> l k 10 -> ok $a 33",
		"2> e k 20 -> queued",
		"2> w k 0 -> timeout",
		"2> w k 1 -> error_not_enqueued",
		"2> e k 20 -> queued",
		"1> r k $a -> ok",
		"2> w k 5 -> ok $b 20",
		"2> r k $b -> ok",
	}},
	{name: "two-phase wait blocks until release", steps: []string{
		"1> l k 10 -> ok $a 33",
		"2> e k -> queued",
		"2> w k 10 &",
		"2< silent",
		"1> r k $a -> ok",
		"2< ok $b 33",
	}},
	{name: "wait after release of the enqueued grant", steps: []string{
		"1> e k -> acquired $a 33",
		"1> r k $a -> ok",
		"1> w k 1 -> error_not_enqueued",
	}},
	{name: "wait after the enqueued lease ran out", cfg: compatCfg{noSweep: true}, steps: []string{
		"1> e k 1 -> acquired $a 1",
		"sleep 1300ms",
		"1> w k 1 -> error_lease_expired",
		"1> w k 1 -> error_not_enqueued",
	}},
	{name: "semaphore wait after the enqueued lease ran out", cfg: compatCfg{noSweep: true}, steps: []string{
		"1> se s 2 1 -> acquired $a 1",
		"sleep 1300ms",
		"1> sw s 1 -> error_lease_expired",
	}},
	{name: "semaphore", steps: []string{
		"1> sl s 10 2 -> ok $a 33",
		"2> sl s 10 2 5 -> ok $b 5",
		"3> sl s 0 2 -> timeout",
		"3> sl s 0 3 -> error_limit_mismatch",
		"1> sn s $a 9 -> ok 9",
		"1> sr s $a -> ok",
		"3> sl s 0 2 -> ok $c 33",
		"1> sr s $a -> error",
	}},
	{name: "semaphore two-phase", steps: []string{
		"1> se s 2 -> acquired $a 33",
		"2> se s 2 -> acquired $b 33",
		"3> se s 2 -> queued",
		"1> sw s 1 -> ok $a 33",
		"1> sr s $a -> ok",
		"3> sw s 5 -> ok $c 33",
	}},
	{name: "lock key is not a semaphore", steps: []string{
		"1> l k 10 -> ok $a 33",
		"2> sl k 0 2 -> error_limit_mismatch",
		"2> se k 2 -> error_limit_mismatch",
	}},
	{name: "max waiters", cfg: compatCfg{maxWaiters: 1}, steps: []string{
		"1> l k 10 -> ok $a 33",
		"2> e k -> queued",
		"3> e k -> error_max_waiters",
		"3> l k 10 -> error_max_waiters",
		"3> sl s 10 1 -> ok $b 33",
		"4> sl s 10 1 &",
		"4< silent",
		"5> sl s 10 1 -> error_max_waiters",
	}},
	{name: "max locks", cfg: compatCfg{maxLocks: 1}, steps: []string{
		"1> l a 10 -> ok $a 33",
		"1> l b 10 -> error_max_locks",
		"1> e b -> error_max_locks",
		"1> sl c 0 2 -> error_max_locks",
	}},
	{name: "auth", cfg: compatCfg{auth: "s3cret"}, steps: []string{
		"1> auth _ s3cret -> ok",
		"1> l k 10 -> ok $a 33",
		"2> auth _ wrong -> error_auth",
		"2 closed",
		"3> l k 10 -> error_auth",
		"3 closed",
	}},
	{name: "auth not configured", steps: []string{
		"1> auth _ s3cret -> error",
		"1> l k 10 -> ok $a 33",
	}},
	{name: "stats", cfg: compatCfg{own: true}, steps: []string{
		"1> l held 10 -> ok $a 33",
		"2> l held 10 &",
		"1> sl pool 10 3 -> ok $b 33",
		"1>~ stats _ _ -> {stats}",
	}},
	{name: "requests in one write answered in order", steps: []string{
		"1! l\np1\n0\nl\np2\n0\nr\np1\n00000000000000000000000000000000\n -> ok $a 33",
		"1< ok $b 33",
		"1< error",
	}},
	{name: "CRLF lines", steps: []string{
		"1! l\r\nk\r\n10\r\n -> ok $a 33",
	}},
}

// deliberateCases are exchanges where latchd answers otherwise than
// dflockd v1.10 on purpose (docs/compat.md says why); dflockd's answer is
// in each case's comment. They run against latchd only.
var deliberateCases = []compatCase{
	// dflockd: ok 33 (n without a TTL resets to the server default).
	{name: "renew without ttl keeps the granted ttl", steps: []string{
		"1> l k 10 5 -> ok $a 5",
		"1> n k $a -> ok 5",
	}},
	// dflockd: error, and the connection stays open.
	{name: "protocol error closes", steps: []string{
		"1! x\nk\n1\n -> error",
		"1 closed",
		"2! l\nk\nabc\n -> error",
		"2 closed",
	}},
	// dflockd: closes without a word.
	{name: "over max connections", cfg: compatCfg{maxConns: 1}, steps: []string{
		"1> l k 10 -> ok $a 33",
		"2< error",
		"2 closed",
	}},
	// dflockd: queued (a lock queues behind its own holder, a semaphore
	// takes a second slot); only an uncollected e is refused.
	{name: "enqueue while holding", steps: []string{
		"1> l k 10 -> ok $a 33",
		"1> e k -> error_already_enqueued",
		"1> e j -> acquired $b 33",
		"1> w j 0 -> ok $b 33",
		"1> e j -> error_already_enqueued",
	}},
	// dflockd: ok with the token of a lease it no longer holds (its w
	// hands out a queued grant even after its lease ran out).
	{name: "queued grant whose lease ran out before the wait", steps: []string{
		"1> l k 10 -> ok $a 33",
		"2> e k 1 -> queued",
		"1> r k $a -> ok",
		"sleep 1300ms",
		"2> w k 1 -> error_lease_expired",
		"3> l k 0 -> ok $b 33",
	}},
}

func TestCompat(t *testing.T) {
	bin := os.Getenv("COMPAT_DFLOCKD_BIN")
	// Cases of one configuration share a latchd server (stopping one
	// takes a while), started here so they outlive the parallel cases.
	shared := map[compatCfg]string{}
	if bin == "" {
		for _, tc := range append(slices.Clone(compatCases), deliberateCases...) {
			c := tc.cfg
			c.noSweep = false // latchd has no sweep
			if !c.own && shared[c] == "" {
				shared[c] = startCompatServer(t, c)
			}
		}
	}
	n := 0
	run := func(t *testing.T, cases []compatCase) {
		for _, tc := range cases {
			n++
			prefix := fmt.Sprintf("c%d-", n)
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				c := tc.cfg
				c.noSweep = false
				switch {
				case bin != "":
					runCompat(t, startDflockd(t, bin, tc.cfg), "", tc.steps)
				case c.own:
					runCompat(t, startCompatServer(t, c), "", tc.steps)
				default:
					runCompat(t, shared[c], prefix, tc.steps)
				}
			})
		}
	}
	t.Run("dflockd", func(t *testing.T) { run(t, compatCases) })
	t.Run("deliberate", func(t *testing.T) {
		if bin != "" && os.Getenv("COMPAT_DELIBERATE") == "" {
			// COMPAT_DELIBERATE=1 runs them against dflockd: each fails,
			// showing dflockd's answer.
			t.Skip("latchd's deliberate differences (docs/compat.md)")
		}
		run(t, deliberateCases)
	})
}

func startCompatServer(t *testing.T, c compatCfg) string {
	s := servertest.StartServer(t, func(ec *engine.Config, sc *server.Config) {
		ec.MaxWaiters = c.maxWaiters
		if c.maxLocks > 0 {
			ec.MaxKeys = c.maxLocks
		}
		sc.MaxConnections = c.maxConns
		sc.AuthToken = c.auth
	})
	return s.Addr
}

// startDflockd runs a dflockd binary with the case's settings.
func startDflockd(t *testing.T, bin string, c compatCfg) string {
	addr := testport.Free(t)
	_, port, _ := net.SplitHostPort(addr)
	sweep := "1"
	if c.noSweep {
		sweep = "3600"
	}
	args := []string{"--host", "127.0.0.1", "--port", port, "--lease-sweep-interval", sweep,
		"--max-waiters", strconv.Itoa(c.maxWaiters), "--max-connections", strconv.Itoa(c.maxConns)}
	if c.maxLocks > 0 {
		args = append(args, "--max-locks", strconv.Itoa(c.maxLocks))
	}
	if c.auth != "" {
		args = append(args, "--auth-token", c.auth)
	}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testutil.Eventually(t, 5*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, "dflockd listening")
	return addr
}

// runCompat plays a script (see the top of the file).
func runCompat(t *testing.T, addr, prefix string, steps []string) {
	conns := map[int]*client{}
	toks := map[string]string{}
	conn := func(n int) *client {
		if conns[n] == nil {
			conns[n] = dial(t, addr)
		}
		return conns[n]
	}
	subst := func(s string) string {
		for k, v := range toks {
			s = strings.ReplaceAll(s, "$"+k, v)
		}
		return s
	}
	for i, st := range steps {
		where := fmt.Sprintf("step %d %q", i+1, st)
		if d, ok := strings.CutPrefix(st, "sleep "); ok {
			dur, err := time.ParseDuration(d)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			time.Sleep(dur)
			continue
		}
		head, rest, _ := strings.Cut(st, " ")
		n, err := strconv.Atoi(strings.TrimRight(head, "><!~"))
		if err != nil {
			t.Fatalf("%s: bad connection", where)
		}
		c := conn(n)
		switch op := strings.TrimLeft(head, "0123456789"); {
		case op == "" && rest == "close":
			_ = c.c.Close()
		case op == "" && rest == "closed":
			c.closed()
		case op == "<" && rest == "silent":
			c.silent(100 * time.Millisecond)
		case op == "<":
			matchCompat(t, where, c.line(), rest, toks)
		case op == "!":
			raw, want, _ := strings.Cut(rest, " -> ")
			c.send(subst(raw))
			matchCompat(t, where, c.line(), want, toks)
		case op == ">" || op == ">~":
			req, want, hasWant := strings.Cut(rest, " -> ")
			async := strings.HasSuffix(req, " &")
			req = strings.TrimSuffix(req, " &")
			f := strings.SplitN(subst(req), " ", 3)
			for len(f) < 3 {
				f = append(f, "")
			}
			f[1] = prefix + f[1]
			switch {
			case async:
				c.req(f[0], f[1], f[2])
			case !hasWant:
				t.Fatalf("%s: no answer to expect", where)
			case op == ">~":
				deadline := time.Now().Add(3 * time.Second)
				for {
					got := c.do(f[0], f[1], f[2])
					if tryMatch(got, want, toks) == nil || time.Now().After(deadline) {
						matchCompat(t, where, got, want, toks)
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			default:
				matchCompat(t, where, c.do(f[0], f[1], f[2]), want, toks)
			}
		default:
			t.Fatalf("%s: bad step", where)
		}
	}
}

func matchCompat(t *testing.T, where, got, want string, toks map[string]string) {
	t.Helper()
	if err := tryMatch(got, want, toks); err != nil {
		t.Fatalf("%s: got %q: %v", where, got, err)
	}
}

// tryMatch compares an answer with a pattern, binding new tokens only
// when the whole line matches.
func tryMatch(got, want string, toks map[string]string) error {
	if want == "{stats}" {
		return checkStats(got)
	}
	g, w := strings.Fields(got), strings.Fields(want)
	if len(g) != len(w) {
		return fmt.Errorf("want %q", want)
	}
	bind := map[string]string{}
	for i := range w {
		switch {
		case w[i] == "*":
		case strings.HasPrefix(w[i], "$"):
			name := w[i][1:]
			if len(g[i]) != 32 || strings.Trim(g[i], "0123456789abcdef") != "" {
				return fmt.Errorf("word %d is not a token (want %q)", i+1, want)
			}
			if prev, ok := toks[name]; ok && prev != g[i] {
				return fmt.Errorf("token $%s is %s, want the earlier %s", name, g[i], prev)
			}
			bind[name] = g[i]
		case w[i] != g[i]:
			return fmt.Errorf("want %q", want)
		}
	}
	for k, v := range bind {
		toks[k] = v
	}
	return nil
}

// checkStats checks the stats answer's shape: dflockd v1.10's fields with
// their JSON types, for the held lock with one waiter and the semaphore
// of the "stats" case.
func checkStats(got string) error {
	body, ok := strings.CutPrefix(got, "ok ")
	if !ok {
		return fmt.Errorf("want ok <json>")
	}
	var st struct {
		Connections *int `json:"connections"`
		Locks       []struct {
			Key             *string  `json:"key"`
			OwnerConnID     *uint64  `json:"owner_conn_id"`
			LeaseExpiresInS *float64 `json:"lease_expires_in_s"`
			Waiters         *int     `json:"waiters"`
		} `json:"locks"`
		Semaphores []struct {
			Key     *string `json:"key"`
			Limit   *int    `json:"limit"`
			Holders *int    `json:"holders"`
			Waiters *int    `json:"waiters"`
		} `json:"semaphores"`
		IdleLocks      []json.RawMessage `json:"idle_locks"`
		IdleSemaphores []json.RawMessage `json:"idle_semaphores"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return err
	}
	switch {
	case st.Connections == nil || *st.Connections != 2:
		return fmt.Errorf("connections: want 2")
	case len(st.Locks) != 1 || st.Locks[0].Key == nil || *st.Locks[0].Key != "held" || st.Locks[0].OwnerConnID == nil ||
		st.Locks[0].LeaseExpiresInS == nil || *st.Locks[0].LeaseExpiresInS <= 30 || st.Locks[0].Waiters == nil || *st.Locks[0].Waiters != 1:
		return fmt.Errorf("locks: want held, owner, ~33 s left, 1 waiter")
	case len(st.Semaphores) != 1 || st.Semaphores[0].Key == nil || *st.Semaphores[0].Key != "pool" || st.Semaphores[0].Limit == nil ||
		*st.Semaphores[0].Limit != 3 || st.Semaphores[0].Holders == nil || *st.Semaphores[0].Holders != 1 || st.Semaphores[0].Waiters == nil:
		return fmt.Errorf("semaphores: want pool, limit 3, 1 holder")
	case st.IdleLocks == nil || st.IdleSemaphores == nil:
		return fmt.Errorf("idle_locks and idle_semaphores: want arrays")
	}
	return nil
}
