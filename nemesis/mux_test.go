//go:build nemesis

package nemesis

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/lincheck"
)

// The Mux workload: beside the plain workers, each phase runs muxes
// client.Mux values (tagged connections, one session each), shared by
// muxWorkers goroutines each, on keys of the phase's own prefix. Goroutine
// g of every Mux takes the keys k with k%muxWorkers == g: inside a Mux no
// two goroutines share a key (they share its session), across Muxes they
// contend, so acquires wait in the queue through the faults. One acquire
// in five runs under a context canceled after a short random delay. Every
// grant writes to the fenced resource before its release. After the
// phase's last heal the goroutines stop, each releasing what it was
// granted; then no key may be held or waited for by a Mux's session
// (an orphan grant), and once the Muxes are closed no key may be held.

const (
	muxes      = 2
	muxWorkers = 8
	muxKeys    = 2 * muxWorkers
	muxWait    = 2 * time.Second // an acquire's queue timeout
)

// muxLoad is the Mux workload over the run: when each acquire was called
// and how it ended, and what the checks found.
type muxLoad struct {
	mu       sync.Mutex
	calls    []int64
	grants   []int64
	errs     []int64 // acquires that failed, neither granted, timed out nor canceled on purpose
	kinds    map[string]int
	muxes    int       // Muxes dialled
	sessions int       // sessions they had: one each unless a session was lost
	bad      []anomaly // anomalies: orphan grants, keys left held
	notes    []anomaly // sessions lost, releases not applied: not anomalies
}

// muxPhase is one phase's Mux workload.
type muxPhase struct {
	c      *cluster
	ml     *muxLoad
	res    *resource
	clk    *lincheck.Recorder
	prefix string
	ttl    time.Duration
	ms     []*client.Mux

	mu       sync.Mutex
	sessions [muxes][]string               // each Mux's sessions, in the order it had them
	failed   [muxes]map[string][]muxFailed // key -> the Mux's failed acquires and releases of it
	granted  []fenceAt                     // the fences the goroutines were granted
}

// muxFailed is a failed acquire or release of a key, for the report.
type muxFailed struct {
	at   int64
	what string
}

// fenceAt is a grant's fence and when its acquire was called.
type fenceAt struct {
	fence uint64
	at    int64
}

// startMux dials the phase's Muxes and starts their goroutines on wg,
// until stop is closed. It returns nil, with the anomaly, when a Mux
// cannot be dialled.
func (c *cluster) startMux(phase int, clk *lincheck.Recorder, res *resource, stop <-chan struct{}, wg *sync.WaitGroup) (*muxPhase, []string) {
	p := &muxPhase{c: c, ml: &c.mux, res: res, clk: clk, prefix: fmt.Sprintf("p%d-m", phase), ttl: duration() + time.Hour}
	for j := range muxes {
		ctx, cancel := context.WithTimeout(context.Background(), serve)
		m, err := client.DialMux(ctx, c.addrs(), 2, client.WithIOTimeout(hold),
			client.WithDialer(func(_ context.Context, _, addr string) (net.Conn, error) { return c.dial.Dial(addr) }))
		cancel()
		if err != nil {
			p.close()
			return nil, []string{fmt.Sprintf("phase %d: mux %d: dial: %v", phase, j, err)}
		}
		p.ms = append(p.ms, m)
		p.ml.mu.Lock()
		p.ml.muxes++
		p.ml.mu.Unlock()
		p.failed[j] = map[string][]muxFailed{}
		p.seen(j, m)
	}
	c.t.Logf("phase %d: %d Muxes of %d goroutines, sessions %v (orphan TTL: the nodes' --orphan-ttl, 5 s by default)",
		phase, muxes, muxWorkers, p.sessions)
	for j, m := range p.ms {
		for g := range muxWorkers {
			rng := rand.New(rand.NewPCG(uint64(100+j*muxWorkers+g), uint64(29+phase)))
			wg.Go(func() { p.worker(j, g, m, rng, stop) })
		}
	}
	return p, nil
}

// worker is goroutine g of Mux j: acquire a key, write to the resource,
// release, until stop is closed. After an error it holds nothing.
func (p *muxPhase) worker(j, g int, m *client.Mux, rng *rand.Rand, stop <-chan struct{}) {
	id := 100 + j*muxWorkers + g // the plain workers' ids are below
	for {
		select {
		case <-stop:
			return
		default:
		}
		key := p.prefix + strconv.Itoa(g+muxWorkers*rng.IntN(muxKeys/muxWorkers))
		ctx, cancel := context.WithTimeout(context.Background(), muxWait+hold)
		canceled := rng.IntN(5) == 0
		if canceled {
			time.AfterFunc(time.Duration(rng.IntN(300))*time.Millisecond, cancel)
		}
		call := p.clk.Now()
		gr, err := m.Acquire(ctx, key, muxWait, p.ttl)
		cancel()
		p.done(j, key, call, err, canceled)
		p.seen(j, m)
		if err != nil {
			time.Sleep(10 * time.Millisecond) // an error at once (a closed connection) must not spin
			continue
		}
		if ft, err := fence.ParseString(gr.Token); err == nil {
			p.res.write(p.clk.Now(), key, id, ft)
			p.mu.Lock()
			p.granted = append(p.granted, fenceAt{ft.Fence, call})
			p.mu.Unlock()
		}
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond) // the other Mux queues meanwhile
		p.res.leave(key, id)
		p.release(j, m, key, gr.Token)
	}
}

// release releases a grant, trying again through the faults for up to
// hold+serve: with the Mux's session, a release is sent again on the next
// connection. One not applied by then is noted, and its key is then found
// held by the check.
func (p *muxPhase) release(j int, m *client.Mux, key, tok string) {
	for end := time.Now().Add(hold + serve); ; {
		ctx, cancel := context.WithTimeout(context.Background(), hold)
		err := m.Release(ctx, key, tok)
		cancel()
		if err == nil {
			return
		}
		at := p.clk.Now()
		p.fail(j, key, at, "release: "+err.Error())
		if errors.Is(err, client.ErrNotHolder) || time.Now().After(end) {
			p.ml.note(at, fmt.Sprintf("mux %d: release of %s (token %s) failed: %v", j, key, tok, err))
			return
		}
	}
}

// done records an acquire's outcome.
func (p *muxPhase) done(j int, key string, call int64, err error, canceled bool) {
	kind := muxKind(err, canceled)
	ml := p.ml
	ml.mu.Lock()
	ml.calls = append(ml.calls, call)
	switch kind {
	case "granted":
		ml.grants = append(ml.grants, call)
	case "timed out", "canceled":
	default:
		ml.errs = append(ml.errs, call)
	}
	if ml.kinds == nil {
		ml.kinds = map[string]int{}
	}
	ml.kinds[kind]++
	ml.mu.Unlock()
	if err != nil {
		p.fail(j, key, call, fmt.Sprintf("acquire (%s): %v", kind, err))
	}
}

// muxKind names an acquire's outcome.
func muxKind(err error, canceled bool) string {
	var nl *client.NotLeaderError
	switch {
	case err == nil:
		return "granted"
	case errors.Is(err, client.ErrTimeout):
		return "timed out"
	case canceled && errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, client.ErrClosed):
		return "closed"
	case errors.As(err, &nl), errors.Is(err, client.ErrNoLeader):
		return "not leader"
	}
	return "other"
}

// fail remembers a failed acquire or release of key by Mux j.
func (p *muxPhase) fail(j int, key string, at int64, what string) {
	p.mu.Lock()
	p.failed[j][key] = append(p.failed[j][key], muxFailed{at, what})
	p.mu.Unlock()
}

// seen notes a new session of Mux j: the one before was lost (it stayed
// away longer than the orphan TTL), and with it what it held.
func (p *muxPhase) seen(j int, m *client.Mux) {
	s := m.Session()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.sessions[j])
	if s == "" || n > 0 && p.sessions[j][n-1] == s {
		return
	}
	p.sessions[j] = append(p.sessions[j], s)
	p.ml.mu.Lock()
	p.ml.sessions++
	p.ml.mu.Unlock()
	if n > 0 {
		p.ml.note(p.clk.Now(), fmt.Sprintf("mux %d: session %s lost, now %s (the connections were away longer than the orphan TTL)",
			j, p.sessions[j][n-1], s))
	}
}

func (ml *muxLoad) note(at int64, what string) {
	ml.mu.Lock()
	ml.notes = append(ml.notes, anomaly{at, what})
	ml.mu.Unlock()
}

func (ml *muxLoad) anomaly(at int64, what string) {
	ml.mu.Lock()
	ml.bad = append(ml.bad, anomaly{at, what})
	ml.mu.Unlock()
}

func (p *muxPhase) close() {
	for _, m := range p.ms {
		_ = m.Close()
	}
}

// finish runs the checks once the goroutines have stopped, after the
// phase's last heal: no Mux key may be held or waited for by a Mux's
// session, which no goroutine holds anything for now (an orphan grant).
// Then it closes the Muxes, which ends their sessions: every key must
// come free. It returns what it could not check.
func (p *muxPhase) finish() []string {
	defer p.close()
	l := p.c.leader(noSkip, serve)
	if l < 0 {
		return []string{fmt.Sprintf("mux: no leader within %v for the orphan check", serve)}
	}
	n, owners := p.c.nodes[l], p.owners()
	for k := range muxKeys {
		key := p.prefix + strconv.Itoa(k)
		ks, _, err := p.c.readKey(p.clk, n, key)
		if err != nil {
			return []string{fmt.Sprintf("mux: no consistent read of %s on %s: %v", key, n.id, err)}
		}
		for _, h := range ks.Holders {
			if o, ok := owners[h.Owner]; ok {
				f, _ := strconv.ParseUint(h.Fence, 16, 64)
				p.orphan(o, key, "held with fence "+h.Fence, f)
			}
		}
		for _, w := range ks.Waiters {
			if o, ok := owners[w.Owner]; ok {
				p.orphan(o, key, "waited for", 0)
			}
		}
	}
	p.close()
	for k := range muxKeys {
		key := p.prefix + strconv.Itoa(k)
		var ks keyState
		var err error
		for end := time.Now().Add(serve); ; time.Sleep(100 * time.Millisecond) {
			ks, _, err = p.c.readKey(p.clk, n, key)
			if err == nil && len(ks.Holders)+len(ks.Waiters) == 0 || time.Now().After(end) {
				break
			}
		}
		if err == nil && len(ks.Holders)+len(ks.Waiters) > 0 {
			p.ml.anomaly(p.clk.Now(), fmt.Sprintf("key %s: still held or waited for %v after its Muxes closed: %+v", key, serve, ks))
		}
	}
	return nil
}

// orphan records an orphan grant (fence > 0) or wait of a Mux on key,
// in the window of when it was granted: between the grants the
// goroutines saw with the fences just below and above its own. A wait
// goes in the window of the Mux's last failed call on key.
func (p *muxPhase) orphan(o muxOwner, key, what string, fence uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	from, to := int64(0), p.clk.Now()
	fs := p.failed[o.j][key]
	if len(fs) > 0 {
		from = fs[len(fs)-1].at
	}
	if fence > 0 && len(p.granted) > 0 {
		g := p.granted
		sort.Slice(g, func(a, b int) bool { return g[a].fence < g[b].fence })
		i := sort.Search(len(g), func(i int) bool { return g[i].fence >= fence })
		from = g[max(i-1, 0)].at
		if i < len(g) {
			to = g[i].at
		}
	}
	var near []string
	for _, f := range fs {
		if f.at >= from-int64(muxWait+hold) && f.at <= to {
			near = append(near, fmt.Sprintf("%.2fs %s", float64(f.at)/1e9, f.what))
		}
	}
	if len(near) > 3 {
		near = near[len(near)-3:]
	}
	p.ml.anomaly(from, fmt.Sprintf("orphan grant on key %s (session %s of mux %d): %s by the session while none of its goroutines holds or waits it; granted between %.2fs and %.2fs; the Mux's failed calls on the key then: %v",
		key, o.sess, o.j, what, float64(from)/1e9, float64(to)/1e9, near))
}

// muxOwner is a session of Mux j.
type muxOwner struct {
	j    int
	sess string
}

// owners maps the owner id of every session a Mux had (as GET
// /v1/locks/{key} shows it: the session id's first 8 bytes) to it.
func (p *muxPhase) owners() map[string]muxOwner {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]muxOwner{}
	for j, ss := range p.sessions {
		for _, s := range ss {
			if raw, err := hex.DecodeString(s); err == nil && len(raw) == 16 {
				out[strconv.FormatUint(binary.BigEndian.Uint64(raw[:8]), 10)] = muxOwner{j, s}
			}
		}
	}
	return out
}

// kindList lists how the acquires ended, by kind.
func (ml *muxLoad) kindList() string {
	var out []string
	for _, k := range []string{"granted", "timed out", "canceled", "deadline", "closed", "not leader", "other"} {
		if n := ml.kinds[k]; n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, k))
		}
	}
	return strings.Join(out, ", ")
}
