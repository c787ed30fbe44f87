package soak

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// FloodStats is what one kind of bad input did.
type FloodStats struct {
	Kind       string
	Conns      int           // connections opened
	Bytes      int64         // bytes sent
	Closed     int           // closed by the server in time
	ErrorLines int           // of those, answered "error" first
	Answers    int           // well-formed answers (half-closed valid requests)
	MaxLife    time.Duration // longest time from first byte to close
	Violations []Violation
}

// floodKind sends one kind of bad input on a connection.
type floodKind struct {
	name     string
	count    int
	parallel int
	// send writes the input and returns the earliest time the server may
	// close the connection (zero: at once) and how long past the read
	// timeout it may take.
	send func(f *flood, c *Conn, i int, rnd *rand.Rand) (notBefore time.Time, extra time.Duration)
}

type flood struct {
	cfg     Config
	addr    string
	holdKey string
	dials   chan struct{} // bounds dials in flight: a SYN storm is not the test
}

// Flood opens cfg's bad-input connections against addr, all kinds at
// once, and checks that the server closes each of them in time. holdKey
// is a key a bystander holds: some inputs wait on it before misbehaving.
func Flood(addr string, cfg Config, holdKey string) []FloodStats {
	f := &flood{cfg: cfg, addr: addr, holdKey: holdKey, dials: make(chan struct{}, 64)}
	kinds := []floodKind{
		{"random bytes", cfg.RandomConns, cfg.FloodParallel, sendRandom},
		{"over-long line", cfg.LongLineConns, cfg.FloodParallel, sendLongLine},
		{"slowloris", cfg.SlowlorisConns, cfg.SlowlorisConns, sendSlowloris},
		{"half-closed", cfg.HalfCloseConns, cfg.FloodParallel, sendHalfClosed},
		{"pipelined past MaxParked", cfg.OverflowConns, cfg.FloodParallel, sendOverflow},
	}
	out := make([]FloodStats, len(kinds))
	var wg sync.WaitGroup
	for k, kind := range kinds {
		wg.Add(1)
		go func() { defer wg.Done(); out[k] = f.run(kind, uint64(k)) }()
	}
	wg.Wait()
	return out
}

func (f *flood) run(k floodKind, seed uint64) FloodStats {
	st := FloodStats{Kind: k.name}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	for p := range min(k.parallel, k.count) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(seed, uint64(p)))
			for i := int(next.Add(1)) - 1; i < k.count; i = int(next.Add(1)) - 1 {
				r := f.one(k, i, rnd)
				mu.Lock()
				st.Conns++
				st.Bytes += r.bytes
				if r.closed {
					st.Closed++
				}
				if r.errorLine {
					st.ErrorLines++
				}
				st.Answers += r.answers
				st.MaxLife = max(st.MaxLife, r.life)
				if r.v != nil {
					st.Violations = append(st.Violations, *r.v)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return st
}

type floodResult struct {
	bytes     int64
	closed    bool
	errorLine bool
	answers   int
	life      time.Duration
	v         *Violation
}

// one opens a connection, sends kind's input and waits for the close.
func (f *flood) one(k floodKind, i int, rnd *rand.Rand) floodResult {
	f.dials <- struct{}{}
	c, err := Dial(f.addr)
	<-f.dials
	if err != nil {
		return floodResult{v: &Violation{"flood", fmt.Sprintf("%s #%d: dial: %v", k.name, i, err)}}
	}
	defer c.Abort()
	start := time.Now()
	notBefore, extra := k.send(f, c, i, rnd)
	// The sweeper runs every ReadTimeout/4 (at most 1 s); allow that and
	// two seconds of scheduling on top.
	deadline := start.Add(f.cfg.ReadTimeout + f.cfg.ReadTimeout/4 + 2*time.Second + extra)
	lines, closed := c.WaitClosed(deadline)
	r := floodResult{bytes: c.sent, closed: closed, life: time.Since(start)}
	for _, l := range lines {
		if l == "error" {
			r.errorLine = true
		} else if _, err := ParseAnswer(l); err == nil {
			r.answers++
		}
	}
	switch {
	case !closed:
		r.v = &Violation{"flood", fmt.Sprintf("%s #%d: still open after %v (read %q)", k.name, i, r.life, lines)}
	case !notBefore.IsZero() && time.Now().Before(notBefore):
		r.v = &Violation{"flood", fmt.Sprintf("%s #%d: closed after %v, before the read timeout %v", k.name, i, r.life, f.cfg.ReadTimeout)}
	}
	return r
}

// notCmd is a byte that cannot start a command, so random input never
// forms a valid request that would park.
func notCmd(rnd *rand.Rand) byte {
	for {
		b := byte(rnd.IntN(256))
		if !bytes.ContainsRune([]byte("aelnrsw"), rune(b)) && b != '\n' {
			return b
		}
	}
}

func sendRandom(_ *flood, c *Conn, _ int, rnd *rand.Rand) (time.Time, time.Duration) {
	b := make([]byte, 16+rnd.IntN(2048))
	for i := range b {
		b[i] = byte(rnd.IntN(256))
	}
	b[0] = notCmd(rnd)
	_ = c.Write(b) // the server may close before it has read everything
	return time.Time{}, 0
}

func sendLongLine(_ *flood, c *Conn, i int, rnd *rand.Rand) (time.Time, time.Duration) {
	n := 257 + rnd.IntN(8192)
	var b []byte
	switch i % 3 {
	case 0: // an over-long key
		b = append(append([]byte("l\n"), bytes.Repeat([]byte("k"), n)...), "\n0\n"...)
	case 1: // an over-long argument
		b = append(append([]byte("l\nkey\n"), bytes.Repeat([]byte("1"), n)...), '\n')
	default: // no newline at all
		b = bytes.Repeat([]byte("x"), n)
	}
	_ = c.Write(b)
	return time.Time{}, 0
}

// sendSlowloris starts a request and trickles one byte of its key every
// ReadTimeout/3 without ever finishing it. The server must close it after
// the read timeout, counted from the first byte, and not before.
func sendSlowloris(f *flood, c *Conn, i int, _ *rand.Rand) (time.Time, time.Duration) {
	start := time.Now()
	if c.Write([]byte("l\nslowloris-"+strconv.Itoa(i))) != nil {
		return time.Time{}, 0
	}
	tick := f.cfg.ReadTimeout / 3
	for time.Since(start) < f.cfg.ReadTimeout+f.cfg.ReadTimeout/4+2*time.Second {
		if _, err := c.ReadLine(time.Now().Add(tick)); !IsTimeout(err) {
			break // closed (or, wrongly, answered: WaitClosed sees the rest)
		}
		if c.Write([]byte("x")) != nil {
			break
		}
	}
	return start.Add(f.cfg.ReadTimeout), 0
}

// sendHalfClosed sends something and shuts the write side down: a valid
// try-lock (the lock must be released when the server closes), a partial
// request, or a lock that waits on a held key for 1 s.
func sendHalfClosed(f *flood, c *Conn, i int, _ *rand.Rand) (time.Time, time.Duration) {
	switch i % 3 {
	case 0:
		_ = c.Send("l", "half-"+strconv.Itoa(i), "0 30")
	case 1:
		_ = c.Write([]byte("l\nhalf"))
	default:
		_ = c.Send("l", f.holdKey, "1")
	}
	_ = c.CloseWrite()
	return time.Time{}, time.Second
}

// sendOverflow waits on the held key, then pipelines 200 KiB behind the
// parked request: past MaxParked (64 KiB) the server must close.
func sendOverflow(f *flood, c *Conn, _ int, _ *rand.Rand) (time.Time, time.Duration) {
	if c.Send("l", f.holdKey, "30") != nil {
		return time.Time{}, 0
	}
	b := bytes.Repeat([]byte("l\nk\n0\n"), 200<<10/6)
	_ = c.Write(b)
	return time.Time{}, 0
}
