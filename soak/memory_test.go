package soak_test

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latchd/server/servertest"
	"github.com/latchd/latchd/soak"
)

// keyWorkers is how many connections create the keys, pipelining.
const keyWorkers = 8

// TestKeysReturnHeap holds cfg.Keys locks at once, releases them, lets
// the engine collect the idle keys, and checks that the heap goes back to
// its baseline after GC (the requirement). A second round checks
// that whatever stayed is a high-water mark, not a leak that grows.
func TestKeysReturnHeap(t *testing.T) {
	cfg := config(t)
	s := startServer(t, cfg)
	rep := soak.NewReport(fmt.Sprintf("%d keys created and released (%s)", cfg.Keys, cfg.Name))
	conns := make([]*soak.Conn, keyWorkers)
	for i := range conns {
		c, err := soak.Dial(s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		t.Cleanup(func() { _ = c.Close() })
	}
	cycle(t, conns, 256, "warm") // fills buffers and pools that any use fills
	if v := settled(s, keyWorkers, 5*time.Second); v != nil {
		t.Fatal(v)
	}
	base := soak.Settle()
	var after1 soak.HeapSample
	for round := 1; round <= 2; round++ {
		prefix := "round" + strconv.Itoa(round)
		toks, createV := acquireAll(conns, cfg.Keys, prefix)
		_, g := s.Engine.Metrics()
		peak := soak.Settle()
		var heldV []soak.Violation
		if g.Keys != cfg.Keys || g.Held != cfg.Keys {
			heldV = append(heldV, soak.Violation{Check: "keys", Detail: fmt.Sprintf("holding %d keys: %s", cfg.Keys, gauges(s))})
		}
		relV := releaseAll(conns, toks, prefix)
		endV := settled(s, keyWorkers, 10*time.Second)
		rep.Add(fmt.Sprintf("round %d: hold all keys", round), fmt.Sprintf("%d locks on %d conns", cfg.Keys, keyWorkers),
			fmt.Sprintf("keys=%d held=%d, heap %s", g.Keys, g.Held, soak.MiB(peak.HeapAlloc)), append(createV, heldV...))
		rep.Add(fmt.Sprintf("round %d: release, collect", round), fmt.Sprintf("%d releases", cfg.Keys), gauges(s), append(relV, endV...))
		// Round 1 is the requirement: back to the baseline.
		// Round 2 tells a leak (it grows again) from memory kept at a
		// high-water mark (it does not).
		from, what := base, "baseline"
		if round == 2 {
			from, what = after1, "round 1"
		}
		bound := soak.HeapBound(from, cfg.HeapTolerance)
		after, ok := soak.SettleTo(bound, 3*time.Second)
		var heapV []soak.Violation
		if !ok {
			heapV = append(heapV, soak.Violation{Check: "heap", Detail: fmt.Sprintf(
				"round %d: heap %s after GC, %s %s, bound %s: %s kept for %d keys that are gone", round,
				soak.MiB(after.HeapAlloc), what, soak.MiB(from.HeapAlloc), soak.MiB(bound),
				soak.MiB(after.HeapAlloc-min(after.HeapAlloc, from.HeapAlloc)), cfg.Keys)})
		}
		rep.Add(fmt.Sprintf("round %d: heap back to %s", round, what), fmt.Sprintf("%s %s, bound %s", what, soak.MiB(from.HeapAlloc), soak.MiB(bound)),
			fmt.Sprintf("after GC %s", soak.MiB(after.HeapAlloc)), heapV)
		after1 = after
	}
	finish(t, rep)
}

// cycle takes and releases n keys on conns, failing the test on error.
func cycle(t *testing.T, conns []*soak.Conn, n int, prefix string) {
	t.Helper()
	toks, v := acquireAll(conns, n, prefix)
	v = append(v, releaseAll(conns, toks, prefix)...)
	if len(v) > 0 {
		t.Fatal(v)
	}
}

// acquireAll try-locks keys prefix-0 .. prefix-(n-1), spread over conns,
// pipelining 256 requests per write. It returns the tokens by key index.
func acquireAll(conns []*soak.Conn, n int, prefix string) ([]string, []soak.Violation) {
	toks := make([]string, n)
	return toks, pipelined(conns, n, func(i int) (string, string, string) {
		return "l", prefix + "-" + strconv.Itoa(i), "0 60"
	}, func(i int, line string) error {
		a, err := soak.ParseAnswer(line)
		if err != nil || !a.Grant() {
			return fmt.Errorf("lock %s-%d: %q %v", prefix, i, line, err)
		}
		toks[i] = a.Token
		return nil
	})
}

// releaseAll releases what acquireAll took.
func releaseAll(conns []*soak.Conn, toks []string, prefix string) []soak.Violation {
	return pipelined(conns, len(toks), func(i int) (string, string, string) {
		return "r", prefix + "-" + strconv.Itoa(i), toks[i]
	}, func(i int, line string) error {
		if line != "ok" {
			return fmt.Errorf("release %s-%d: %q", prefix, i, line)
		}
		return nil
	})
}

// pipelined sends request i for i in [0, n) on conns[i%len(conns)], 256
// per write, and hands each answer to check.
func pipelined(conns []*soak.Conn, n int, req func(int) (string, string, string), check func(int, string) error) []soak.Violation {
	const batch = 256
	var wg sync.WaitGroup
	var mu sync.Mutex
	var v []soak.Violation
	for w, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var idx []int
			var buf []byte
			for i := w; i < n; i += len(conns) {
				idx = append(idx, i)
				if len(idx) < batch && i+len(conns) < n {
					continue
				}
				buf = buf[:0]
				for _, j := range idx {
					cmd, key, arg := req(j)
					buf = append(buf, cmd+"\n"+key+"\n"+arg+"\n"...)
				}
				err := c.Write(buf)
				for _, j := range idx {
					var line string
					if err == nil {
						line, err = c.ReadLine(time.Now().Add(30 * time.Second))
					}
					if err == nil {
						err = check(j, line)
					}
					if err != nil {
						mu.Lock()
						v = append(v, soak.Violation{Check: "keys", Detail: err.Error()})
						mu.Unlock()
						return
					}
				}
				idx = idx[:0]
			}
		}()
	}
	wg.Wait()
	return v
}

// TestConnectionChurn opens and closes cfg.ChurnConns connections in waves
// of cfg.ChurnWave open at once: some lock and release, some reset while
// holding, some close while waiting on a held key, some send half a
// request, some nothing. Afterwards nothing may be left: no connection,
// holder, waiter or key in the server, no extra goroutine, and the heap
// back to its baseline.
func TestConnectionChurn(t *testing.T) {
	cfg := config(t)
	s := startServer(t, cfg)
	rep := soak.NewReport(fmt.Sprintf("%d connections opened and closed (%s)", cfg.ChurnConns, cfg.Name))
	sentinel, err := soak.Dial(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sentinel.Close() })
	line, err := sentinel.Do("l", "churn-held", "0 600", time.Now().Add(10*time.Second))
	held, perr := soak.ParseAnswer(line)
	if err != nil || perr != nil || !held.Grant() {
		t.Fatalf("sentinel lock: %q %v %v", line, err, perr)
	}
	churnWave(s.Addr, min(cfg.ChurnWave, 200), 0, &churnStats{}) // warm up gnet's and the runtime's pools
	if v := churnSettled(s); v != nil {
		t.Fatal(v)
	}
	base := soak.Settle()
	bound := soak.HeapBound(base, cfg.HeapTolerance)
	var st churnStats
	var waveV []soak.Violation
	for first := 0; first < cfg.ChurnConns; first += cfg.ChurnWave {
		churnWave(s.Addr, min(cfg.ChurnWave, cfg.ChurnConns-first), first, &st)
		if v := churnSettled(s); v != nil {
			waveV = append(waveV, v...)
			break
		}
	}
	if line, err := sentinel.Do("r", "churn-held", held.Token, time.Now().Add(10*time.Second)); err != nil || line != "ok" {
		waveV = append(waveV, soak.Violation{Check: "churn", Detail: fmt.Sprintf("sentinel lost its lock: %q %v", line, err)})
	}
	_ = sentinel.Close()
	endV := settled(s, 0, 10*time.Second)
	gor, gorOK := soak.GoroutinesBack(base.Goroutines, 10*time.Second)
	after, heapOK := soak.SettleTo(bound, 5*time.Second)

	rep.Add("waves", fmt.Sprintf("%d conns in waves of %d", st.opened.Load(), cfg.ChurnWave),
		fmt.Sprintf("%d dial errors, %d locked, %d reset holding, %d closed waiting, %d half requests, %d idle",
			st.dialErr.Load(), st.locked.Load(), st.resetHolding.Load(), st.closedWaiting.Load(), st.partial.Load(), st.idle.Load()),
		append(waveV, st.violations()...))
	rep.Add("server empty", "conns=held=waiting=keys=0", gauges(s), endV)
	var gorV []soak.Violation
	if !gorOK {
		gorV = append(gorV, soak.Violation{Check: "goroutines", Detail: fmt.Sprintf("%d goroutines, baseline %d", gor, base.Goroutines)})
	}
	rep.Add("goroutines back to baseline", fmt.Sprintf("baseline %d", base.Goroutines), fmt.Sprintf("%d", gor), gorV)
	var heapV []soak.Violation
	if !heapOK {
		heapV = append(heapV, soak.Violation{Check: "heap", Detail: fmt.Sprintf("heap %s after GC, baseline %s, bound %s",
			soak.MiB(after.HeapAlloc), soak.MiB(base.HeapAlloc), soak.MiB(bound))})
	}
	rep.Add("heap back to baseline", fmt.Sprintf("baseline %s, bound %s", soak.MiB(base.HeapAlloc), soak.MiB(bound)),
		fmt.Sprintf("after GC %s", soak.MiB(after.HeapAlloc)), heapV)
	finish(t, rep)
}

// churnStats counts a churn run.
type churnStats struct {
	opened, dialErr, locked, resetHolding, closedWaiting, partial, idle atomic.Int64

	mu   sync.Mutex
	viol []soak.Violation
}

func (st *churnStats) violate(format string, args ...any) {
	st.mu.Lock()
	st.viol = append(st.viol, soak.Violation{Check: "churn", Detail: fmt.Sprintf(format, args...)})
	st.mu.Unlock()
}

func (st *churnStats) violations() []soak.Violation {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.viol
}

// churnWave opens n connections (numbered from first), each doing one
// thing, keeps them all open at once, then closes them, half with a FIN
// and half with a reset.
func churnWave(addr string, n, first int, st *churnStats) {
	conns := make([]*soak.Conn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				conns[i] = churnOne(addr, first+i, st)
			}
		}()
	}
	wg.Wait()
	for i, c := range conns {
		switch {
		case c == nil:
		case i%2 == 0:
			_ = c.Close()
		default:
			_ = c.Abort()
		}
	}
}

// churnOne opens connection i and does one of five things on it.
func churnOne(addr string, i int, st *churnStats) *soak.Conn {
	c, err := soak.Dial(addr)
	if err != nil {
		st.dialErr.Add(1)
		st.violate("conn %d: dial: %v", i, err)
		return nil
	}
	st.opened.Add(1)
	deadline := time.Now().Add(10 * time.Second)
	switch i % 5 {
	case 0: // lock and release a shared key
		key := "churn-" + strconv.Itoa(i%64)
		line, err := c.Do("l", key, "0 30", deadline)
		a, perr := soak.ParseAnswer(line)
		switch {
		case err != nil || perr != nil:
			st.violate("conn %d: l %s: %q %v %v", i, key, line, err, perr)
		case a.Grant():
			if line, err := c.Do("r", key, a.Token, deadline); err != nil || line != "ok" {
				st.violate("conn %d: r %s: %q %v", i, key, line, err)
			}
			st.locked.Add(1)
		case a.Word != "timeout":
			st.violate("conn %d: l %s: %q", i, key, line)
		}
	case 1: // take an own key and keep it until the connection goes
		line, err := c.Do("l", "churn-own-"+strconv.Itoa(i), "0 600", deadline)
		if a, perr := soak.ParseAnswer(line); err != nil || perr != nil || !a.Grant() {
			st.violate("conn %d: own lock: %q %v %v", i, line, err, perr)
		}
		st.resetHolding.Add(1)
	case 2: // wait on the sentinel's key until the connection goes
		if err := c.Send("l", "churn-held", "600"); err != nil {
			st.violate("conn %d: l churn-held: %v", i, err)
		}
		st.closedWaiting.Add(1)
	case 3: // half a request
		if err := c.Write([]byte("l\nchurn")); err != nil {
			st.violate("conn %d: partial: %v", i, err)
		}
		st.partial.Add(1)
	default:
		st.idle.Add(1)
	}
	return c
}

// churnSettled waits until only the sentinel is connected, holding its
// lock, with no waiter and no other key left.
func churnSettled(s *servertest.Server) []soak.Violation {
	ok := soak.PollUntil(10*time.Second, func() bool {
		_, g := s.Engine.Metrics()
		return s.TCP.Connections() == 1 && g.Held == 1 && g.Waiting == 0 && g.Keys == 1
	})
	if ok {
		return nil
	}
	return []soak.Violation{{Check: "churn", Detail: "after a wave: " + gauges(s) + ", want keys=1 held=1 waiting=0 conns=1"}}
}
