package soak

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Bystanders are well-behaved clients that each hold one lock for the
// whole run and keep acquiring and releasing locks of their own, paced,
// while something else (a flood) happens. They record their latency per
// phase and every answer that is not what a healthy server gives.
type Bystanders struct {
	n     int
	phase atomic.Int32
	stop  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	lat   [2][]time.Duration // per phase: request sent to answer read
	viol  []Violation
	alive int // held locks whose final renew succeeded
	conns []*Conn
}

// HoldKey is the lock bystander i holds throughout.
func HoldKey(i int) string { return "bystander-hold-" + strconv.Itoa(i) }

// StartBystanders connects n bystanders to addr; each takes its hold lock
// (60 s lease) and starts its loop, one operation every 5 ms. It returns
// once every hold lock is taken.
func StartBystanders(addr string, n int) (*Bystanders, error) {
	b := &Bystanders{n: n, stop: make(chan struct{})}
	ready := make(chan error, n)
	for i := range n {
		b.wg.Add(1)
		go func() { defer b.wg.Done(); b.run(addr, i, ready) }()
	}
	for range n {
		if err := <-ready; err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// Phase switches the latency bucket: 0 before the disturbance, 1 during.
func (b *Bystanders) Phase(p int) { b.phase.Store(int32(p)) }

// Ops returns the operations done in phase p so far.
func (b *Bystanders) Ops(p int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.lat[p])
}

func (b *Bystanders) violate(check, format string, args ...any) {
	b.mu.Lock()
	b.viol = append(b.viol, Violation{check, fmt.Sprintf(format, args...)})
	b.mu.Unlock()
}

func (b *Bystanders) run(addr string, i int, ready chan<- error) {
	c, err := Dial(addr)
	if err != nil {
		ready <- err
		return
	}
	b.mu.Lock()
	b.conns = append(b.conns, c)
	b.mu.Unlock()
	hold := HoldKey(i)
	line, err := c.Do("l", hold, "0 60", time.Now().Add(10*time.Second))
	a, perr := ParseAnswer(line)
	if err != nil || perr != nil || !a.Grant() {
		ready <- fmt.Errorf("bystander %d: hold lock: %q %v %v", i, line, err, perr)
		return
	}
	ready <- nil
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var tok, locked string
	for n := 0; ; n++ {
		select {
		case <-b.stop:
			b.finish(c, i, hold, a.Token, locked, tok)
			return
		case <-tick.C:
		}
		var cmd, key, arg, want string
		switch {
		case n%50 == 49:
			cmd, key, arg, want = "n", hold, a.Token+" 60", "ok 60"
		case tok == "":
			locked = "bystander-" + strconv.Itoa(i) + "-" + strconv.Itoa(n%4)
			cmd, key, arg, want = "l", locked, "0 30", "ok "
		default:
			cmd, key, arg, want = "r", locked, tok, "ok"
		}
		sent := time.Now()
		line, err := c.Do(cmd, key, arg, sent.Add(10*time.Second))
		took := time.Since(sent)
		if err != nil {
			b.violate("bystanders", "bystander %d: %s %q: %v after %v", i, cmd, key, err, took)
			return
		}
		b.mu.Lock()
		p := b.phase.Load()
		b.lat[p] = append(b.lat[p], took)
		b.mu.Unlock()
		switch {
		case cmd == "l" && len(line) > 3 && line[:3] == want:
			g, err := ParseAnswer(line)
			if err != nil {
				b.violate("bystanders", "bystander %d: %v", i, err)
			}
			tok = g.Token
		case cmd != "l" && line == want:
			if cmd == "r" {
				tok = ""
			}
		default:
			b.violate("bystanders", "bystander %d: %s %q %q: got %q, want %q", i, cmd, key, arg, line, want)
			tok = ""
		}
	}
}

// finish releases the loop's lock, if any, and checks the hold lock
// survived: renewing it with its token works.
func (b *Bystanders) finish(c *Conn, i int, hold, tok, locked, ltok string) {
	if ltok != "" {
		if line, err := c.Do("r", locked, ltok, time.Now().Add(10*time.Second)); err != nil || line != "ok" {
			b.violate("bystanders", "bystander %d: r %q: %q %v", i, locked, line, err)
		}
	}
	line, err := c.Do("n", hold, tok+" 60", time.Now().Add(10*time.Second))
	if err != nil || line != "ok 60" {
		b.violate("bystanders", "bystander %d: hold lock %q lost: renew got %q %v", i, hold, line, err)
		return
	}
	b.mu.Lock()
	b.alive++
	b.mu.Unlock()
}

// Stop ends the loops; each renews its hold lock one last time. The
// connections stay open, holding only their hold locks, until Close.
func (b *Bystanders) Stop() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	b.wg.Wait()
}

// Close stops the loops and closes the connections.
func (b *Bystanders) Close() {
	b.Stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
}

// Result returns the latency percentiles per phase, how many hold locks
// survived, and the violations seen.
func (b *Bystanders) Result() (p50, p99, worst [2]time.Duration, ops [2]int, alive int, v []Violation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for p := range b.lat {
		l := slices.Clone(b.lat[p])
		slices.Sort(l)
		ops[p] = len(l)
		if len(l) > 0 {
			p50[p], p99[p], worst[p] = l[len(l)/2], l[len(l)*99/100], l[len(l)-1]
		}
	}
	return p50, p99, worst, ops, b.alive, slices.Clone(b.viol)
}
