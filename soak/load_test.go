package soak

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// LoadStats counts what a Load did.
type LoadStats struct {
	Requests     atomic.Int64 // requests sent
	Grants       atomic.Int64 // grants received
	Timeouts     atomic.Int64 // blocking requests answered timeout
	Renewals     atomic.Int64 // successful renewals
	Releases     atomic.Int64 // successful releases
	TwoPhase     atomic.Int64 // e/w rounds
	Pauses       atomic.Int64 // holders that slept past their lease
	Lapsed       atomic.Int64 // of those, releases refused because the lease had expired
	DropHolding  atomic.Int64 // connections reset while holding
	DropWaiting  atomic.Int64 // connections reset while waiting
	Reconnects   atomic.Int64 // new connections after a drop
	DialFailures atomic.Int64 // dials that failed (and were retried)
}

// Load is a set of clients hammering a server at random: acquiring and
// releasing hot and cold keys, renewing, enqueueing and waiting, sleeping
// past their lease, and dropping their connections while holding or
// waiting, then reconnecting. It records everything in a History.
type Load struct {
	cfg  Config
	addr string
	h    *History
	st   LoadStats

	wg      sync.WaitGroup
	mu      sync.Mutex
	workers []*worker
}

// StartLoad starts cfg.Clients clients against addr for cfg.Duration.
func StartLoad(addr string, cfg Config, h *History, seed uint64) *Load {
	l := &Load{cfg: cfg, addr: addr, h: h}
	stop := h.Now() + cfg.Duration
	for i := range cfg.Clients {
		w := &worker{l: l, id: i, rnd: rand.New(rand.NewPCG(seed, uint64(i)))}
		l.workers = append(l.workers, w)
		l.wg.Add(1)
		go func() { defer l.wg.Done(); w.run(stop) }()
	}
	return l
}

// Stats returns the running counters.
func (l *Load) Stats() *LoadStats { return &l.st }

// Wait blocks until every client has finished its last action. Their
// connections stay open, holding nothing.
func (l *Load) Wait() { l.wg.Wait() }

// Close closes every client's connection. Call it after Wait.
func (l *Load) Close() {
	for _, w := range l.workers {
		if w.c != nil {
			_ = w.c.Close()
			w.c = nil
		}
	}
}

func hotLock(i int) string { return "hot-lock-" + strconv.Itoa(i) }
func hotSem(i int) string  { return "hot-sem-" + strconv.Itoa(i) }

// worker is one client. Its connection is replaced after a drop.
type worker struct {
	l   *Load
	id  int
	rnd *rand.Rand
	c   *Conn
}

// held is a grant in progress on the client side.
type held struct {
	g     Grant
	token string
	ttl   time.Duration
	// lease is a lower bound on the server's lease deadline, proven by an
	// answer to a request sent at a known time; 0 when unknown.
	lease time.Duration
	// soft is the deadline assuming the server's clock reading lagged the
	// request by at most StaleSlack; it only flags leases that end early.
	soft time.Duration
}

// early is the point before which a refused renew or release means the
// lease ended early.
func (hd *held) early() time.Duration { return max(hd.lease, hd.soft) }

func (w *worker) run(stop time.Duration) {
	h := w.l.h
	for h.Now() < stop {
		if w.c == nil && !w.dial() {
			continue
		}
		key, limit := w.pick()
		switch r := w.rnd.IntN(100); {
		case r < 3:
			w.pause(key, limit)
		case r < 6:
			w.dropHolding(key, limit)
		case r < 9:
			w.dropWaiting()
		case r < 20:
			w.twoPhase(key, limit)
		default:
			w.hold(key, limit)
		}
	}
}

func (w *worker) dial() bool {
	c, err := Dial(w.l.addr)
	if err != nil {
		w.l.st.DialFailures.Add(1)
		if w.l.st.DialFailures.Load() > 100 {
			w.l.h.Violate("connections", "client %d: dial: %v", w.id, err)
			time.Sleep(100 * time.Millisecond) // pacing; the run is failing anyway
		}
		return false
	}
	w.c = c
	return true
}

// pick returns a hot key half the time, else a cold lock key.
func (w *worker) pick() (string, int) {
	cfg := &w.l.cfg
	if w.rnd.IntN(2) == 0 {
		return "cold-" + strconv.Itoa(w.rnd.IntN(cfg.ColdKeys)), 1
	}
	return w.pickHot()
}

func (w *worker) pickHot() (string, int) {
	cfg := &w.l.cfg
	if i := w.rnd.IntN(cfg.HotLocks + cfg.HotSems); i < cfg.HotLocks {
		return hotLock(i), 1
	} else {
		return hotSem(i - cfg.HotLocks), cfg.SemLimit
	}
}

// fail records v and drops the connection, whose state is now unknown.
func (w *worker) fail(check, format string, args ...any) {
	w.l.h.Violate(check, "client %d: "+format, append([]any{w.id}, args...)...)
	w.drop()
}

func (w *worker) drop() {
	if w.c != nil {
		_ = w.c.Abort()
		w.c = nil
		w.l.st.Reconnects.Add(1)
	}
}

// do sends one request and reads its answer within wait + LostAfter. A
// missing answer or a closed connection is a violation (these clients
// never misbehave); ok is false and the connection is dropped.
func (w *worker) do(cmd, key, arg string, wait time.Duration) (line string, sent, recv time.Duration, ok bool) {
	h := w.l.h
	w.l.st.Requests.Add(1)
	sent = h.Now()
	if err := w.c.Send(cmd, key, arg); err != nil {
		w.fail("connections", "%s %q: write: %v", cmd, key, err)
		return "", sent, h.Now(), false
	}
	line, err := w.c.ReadLine(h.At(sent + wait + w.l.cfg.LostAfter))
	recv = h.Now()
	if err != nil {
		if IsTimeout(err) && wait > 0 {
			h.AddWait(Wait{Key: key, Cmd: cmd, Timeout: wait, Sent: sent, Recv: recv, Result: "lost"})
			w.drop()
			return "", sent, recv, false
		}
		w.fail("connections", "%s %q %q: read: %v (after %v)", cmd, key, arg, err, recv-sent)
		return "", sent, recv, false
	}
	return line, sent, recv, true
}

// acquire sends l or sl with timeout t and lease ttl. It returns the grant
// or nil on a timeout or failure.
func (w *worker) acquire(key string, limit int, t, ttl time.Duration) *held {
	cmd, arg := "l", secs(t)+" "+secs(ttl)
	if limit > 1 {
		cmd, arg = "sl", secs(t)+" "+strconv.Itoa(limit)+" "+secs(ttl)
	}
	line, sent, recv, ok := w.do(cmd, key, arg, t)
	if !ok {
		return nil
	}
	return w.answered(cmd, key, limit, t, ttl, line, sent, sent, recv)
}

// answered handles the answer to a blocking request (l, sl, w, sw) sent
// at sent; reqSent is when the request that will be granted left (the e
// of an e/w pair).
func (w *worker) answered(cmd, key string, limit int, t, ttl time.Duration, line string, reqSent, sent, recv time.Duration) *held {
	h := w.l.h
	a, err := ParseAnswer(line)
	switch {
	case err == nil && a.Word == "ok" && a.Grant():
		if a.N != int64(ttl/time.Second) {
			w.l.h.Violate("answers", "client %d: %s %q: ttl %d, asked for %v", w.id, cmd, key, a.N, ttl)
		}
		h.AddWait(Wait{Key: key, Cmd: cmd, Timeout: t, Sent: sent, Recv: recv, Result: "granted"})
		w.l.st.Grants.Add(1)
		hd := &held{g: Grant{Key: key, Limit: limit, Fence: a.Fence, Sent: reqSent, Recv: recv}, token: a.Token, ttl: ttl,
			soft: reqSent + ttl - w.l.cfg.StaleSlack}
		switch {
		case cmd == "w" || cmd == "sw":
			hd.lease = sent + ttl // w restarts the lease at its own "now"
		case t == 0:
			hd.lease = sent + ttl // a try-lock is granted in its own turn
		}
		return hd
	case err == nil && a.Word == "timeout":
		h.AddWait(Wait{Key: key, Cmd: cmd, Timeout: t, Sent: sent, Recv: recv, Result: "timeout"})
		w.l.st.Timeouts.Add(1)
		return nil
	default:
		h.AddWait(Wait{Key: key, Cmd: cmd, Timeout: t, Sent: sent, Recv: recv, Result: line})
		w.drop()
		return nil
	}
}

// renew renews hd with its ttl; it reports success.
func (w *worker) renew(hd *held) bool {
	cmd := "n"
	if hd.g.Limit > 1 {
		cmd = "sn"
	}
	line, sent, recv, ok := w.do(cmd, hd.g.Key, hd.token+" "+secs(hd.ttl), 0)
	if !ok {
		return false
	}
	if line == "ok "+secs(hd.ttl) {
		w.l.st.Renewals.Add(1)
		hd.lease = sent + hd.ttl
		return true
	}
	if line == "error" && recv >= hd.early() {
		return false // the lease lapsed: allowed once its deadline may have passed
	}
	w.fail("leases", "%s %q fence %d: %q at %v, lease until at least %v", cmd, hd.g.Key, hd.g.Fence, line, recv, hd.early())
	return false
}

// release releases hd and records the grant.
func (w *worker) release(hd *held) {
	cmd := "r"
	if hd.g.Limit > 1 {
		cmd = "sr"
	}
	line, sent, recv, ok := w.do(cmd, hd.g.Key, hd.token, 0)
	if !ok {
		w.endAt(hd, hd.lease) // the connection is gone: the lease bound still holds
		return
	}
	switch {
	case line == "ok":
		w.l.st.Releases.Add(1)
		w.endAt(hd, sent)
	case line == "error" && recv >= hd.early():
		w.endAt(hd, hd.lease)
	default:
		w.endAt(hd, hd.lease)
		w.fail("leases", "%s %q fence %d: %q at %v, lease until at least %v", cmd, hd.g.Key, hd.g.Fence, line, recv, hd.early())
	}
}

// endAt records hd as held until end, if end proves anything.
func (w *worker) endAt(hd *held, end time.Duration) {
	if end > hd.g.Recv {
		hd.g.End, hd.g.Ended = end, true
	}
	w.l.h.AddGrant(hd.g)
}

func (w *worker) sleep(max time.Duration) {
	if max > 0 {
		time.Sleep(time.Duration(w.rnd.Int64N(int64(max)))) // the workload: holding a lock for a while
	}
}

// timeout picks a wait: hot keys up to 2 s, cold ones up to 1 s.
func (w *worker) timeout(key string) time.Duration {
	n := 2
	if key[0] == 'c' {
		n = 1
	}
	return time.Duration(w.rnd.IntN(n+1)) * time.Second
}

// hold acquires, maybe renews, holds briefly and releases.
func (w *worker) hold(key string, limit int) {
	ttl := time.Duration(2+w.rnd.IntN(2)) * time.Second
	hd := w.acquire(key, limit, w.timeout(key), ttl)
	if hd == nil {
		return
	}
	if w.rnd.IntN(10) < 3 && !w.renew(hd) {
		w.endAt(hd, hd.lease)
		return
	}
	w.sleep(w.l.cfg.MaxHold)
	w.release(hd)
}

// pause acquires with a 1 s lease, renews once, then sleeps past the
// lease before releasing: the release should find it expired.
func (w *worker) pause(key string, limit int) {
	hd := w.acquire(key, limit, w.timeout(key), time.Second)
	if hd == nil {
		return
	}
	w.l.st.Pauses.Add(1)
	if !w.renew(hd) {
		w.endAt(hd, hd.lease)
		return
	}
	time.Sleep(hd.lease + 150*time.Millisecond - w.l.h.Now()) // the workload: a stalled holder
	cmd := "r"
	if limit > 1 {
		cmd = "sr"
	}
	line, sent, _, ok := w.do(cmd, key, hd.token, 0)
	switch {
	case !ok:
		w.endAt(hd, hd.lease)
	case line == "ok":
		w.endAt(hd, sent) // the server's deadline was later than proven
	case line == "error":
		w.l.st.Lapsed.Add(1)
		w.endAt(hd, hd.lease)
	default:
		w.endAt(hd, hd.lease)
		w.fail("leases", "%s %q after the lease: %q", cmd, key, line)
	}
}

// dropHolding acquires, renews (to prove a lease), then resets the
// connection while holding.
func (w *worker) dropHolding(key string, limit int) {
	hd := w.acquire(key, limit, w.timeout(key), 2*time.Second)
	if hd == nil {
		return
	}
	if !w.renew(hd) {
		w.endAt(hd, hd.lease)
		return
	}
	w.sleep(w.l.cfg.MaxHold)
	closed := w.l.h.Now()
	w.drop()
	w.l.st.DropHolding.Add(1)
	w.endAt(hd, min(closed, hd.lease))
}

// dropWaiting sends a blocking request on a hot key and resets the
// connection before (or just as) it is answered.
func (w *worker) dropWaiting() {
	key, limit := w.pickHot()
	cmd, arg := "l", "2 2"
	if limit > 1 {
		cmd, arg = "sl", "2 "+strconv.Itoa(limit)+" 2"
	}
	w.l.st.Requests.Add(1)
	if err := w.c.Send(cmd, key, arg); err != nil {
		w.fail("connections", "%s %q: write: %v", cmd, key, err)
		return
	}
	w.sleep(30 * time.Millisecond)
	w.drop() // any grant that arrived meanwhile is unread: the server must drop it
	w.l.st.DropWaiting.Add(1)
}

// twoPhase runs e then w (se then sw on semaphores).
func (w *worker) twoPhase(key string, limit int) {
	ttl := time.Duration(2+w.rnd.IntN(2)) * time.Second
	ecmd, earg, wcmd := "e", secs(ttl), "w"
	if limit > 1 {
		ecmd, earg, wcmd = "se", strconv.Itoa(limit)+" "+secs(ttl), "sw"
	}
	w.l.st.TwoPhase.Add(1)
	line, esent, recv, ok := w.do(ecmd, key, earg, 0)
	if !ok {
		return
	}
	var hd *held
	a, err := ParseAnswer(line)
	switch {
	case err == nil && a.Word == "acquired" && a.Grant():
		w.l.st.Grants.Add(1)
		hd = &held{g: Grant{Key: key, Limit: limit, Fence: a.Fence, Sent: esent, Recv: recv}, token: a.Token, ttl: ttl,
			lease: esent + ttl}
	case err == nil && a.Word == "queued":
		t := w.timeout(key)
		wline, wsent, wrecv, ok := w.do(wcmd, key, secs(t), t)
		if !ok {
			return
		}
		if wline == "error_lease_expired" || wline == "error" { // "error": a latchd before the dflockd words
			// Legal only if the grant made between e and w lapsed first.
			if wrecv < esent+ttl-w.l.cfg.StaleSlack {
				w.fail("leases", "%s %q: error %v after e, lease %v", wcmd, key, wrecv-esent, ttl)
			}
			return
		}
		hd = w.answered(wcmd, key, limit, t, ttl, wline, esent, wsent, wrecv)
	default:
		w.fail("answers", "%s %q: unexpected %q", ecmd, key, line)
		return
	}
	if hd == nil {
		return
	}
	w.sleep(w.l.cfg.MaxHold)
	w.release(hd)
}

func secs(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// String summarises the counters.
func (s *LoadStats) String() string {
	return fmt.Sprintf("%d requests, %d grants, %d timeouts, %d renewals, %d releases, %d e/w, "+
		"%d paused past lease (%d lapsed), %d reset while holding, %d reset while waiting, %d reconnects, %d failed dials",
		s.Requests.Load(), s.Grants.Load(), s.Timeouts.Load(), s.Renewals.Load(), s.Releases.Load(),
		s.TwoPhase.Load(), s.Pauses.Load(), s.Lapsed.Load(), s.DropHolding.Load(), s.DropWaiting.Load(),
		s.Reconnects.Load(), s.DialFailures.Load())
}
