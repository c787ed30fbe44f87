//go:build nemesis

package nemesis

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/latchd/latchd/internal/lincheck"
)

const (
	workers = 12
	keys    = 24
	// hold is how long each fault lasts. A fault of the leader must see a
	// new leader serve within it: 5 s is the worst failover allowed.
	hold   = 5 * time.Second
	settle = 1 * time.Second  // quiet time between faults
	serve  = 10 * time.Second // liveness bound: a leader serves within it after heal
	// phaseFaults is how many faults a phase injects: about 90 s of load.
	phaseFaults = 10
)

// window is one injected fault, from its start to the next one's.
type window struct {
	fault      int
	node       string
	start, end int64 // recorder time
	failover   time.Duration
	served     bool // a grant came from a node other than the target
	notes      []anomaly
}

func duration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("NEMESIS_DURATION")); err == nil && d > 0 {
		return d
	}
	return 12 * time.Minute
}

// setup makes the topology and starts the cluster, or skips the test
// when this machine cannot make namespaces.
func setup(t *testing.T) *cluster {
	if os.Geteuid() != 0 {
		t.Skip("nemesis: skipped, needs root to create network namespaces")
	}
	for _, tool := range []string{"ip", "tc", "losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("nemesis: skipped, %s is not installed", tool)
		}
	}
	dir := t.TempDir()
	tp, err := newTopo(t, 3)
	if err != nil {
		t.Skipf("nemesis: skipped, cannot create network namespaces here: %v", err)
	}
	dial, err := newNSDialer(t, tp.client, 4)
	if err != nil {
		t.Skipf("nemesis: skipped, cannot join the clients' namespace: %v", err)
	}
	c := newCluster(t, tp, build(t, dir, "latchd"), dir, dial)
	c.topo, c.ctl = tp, build(t, dir, "latchctl")
	if c.leader(noSkip, 20*time.Second) < 0 {
		t.Fatal("no leader within 20s of start")
	}
	return c
}

func TestNemesis(t *testing.T) {
	d := duration()
	c := setup(t)
	clk, res, tl := lincheck.NewRecorder(), newResource(), &timeline{}
	var (
		wins   []*window
		lins   []lincheck.Result
		global []string
		next   int // the next fault of the matrix
	)
	end := time.Now().Add(d)
	for phase := 0; time.Now().Add(hold + 2*settle).Before(end); phase++ {
		ws, lin, g := c.phase(t, phase, &next, end, clk, res, tl)
		wins, lins, global = append(wins, ws...), append(lins, lin), append(global, g...)
		if len(ws) == 0 {
			break
		}
	}
	for i := range wins { // a fault's window lasts until the next one's
		wins[i].end = clk.Now() + int64(time.Hour)
		if i+1 < len(wins) {
			wins[i].end = wins[i+1].start
		}
	}
	a := report(t, wins, res, tl, &c.mux, lins, global, c.margins)
	if a > 0 {
		t.Errorf("nemesis: %d anomalies", a)
	}
}

// phase runs load on keys of its own while up to phaseFaults faults of
// the matrix are injected, from the next'th on, then stops the load,
// heals, and checks what the nodes hold and the phase's history. A phase
// keeps the history porcupine checks at a size it checks in seconds.
func (c *cluster) phase(t *testing.T, phase int, next *int, end time.Time, clk *lincheck.Recorder, res *resource, tl *timeline) ([]*window, lincheck.Result, []string) {
	rec := lincheck.NewRecorder()
	off := clk.Now() - rec.Now() // phase time to run time
	ttl := duration() + time.Hour
	prefix := fmt.Sprintf("p%d-k", phase)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range workers {
		rng := rand.New(rand.NewPCG(uint64(id), uint64(29+phase)))
		lc := lincheck.NewClient(c.addrs(), id)
		lc.Dial = c.dial.Dial
		wg.Go(func() {
			lincheck.Worker(id, lc, rec, func() string { return prefix + strconv.Itoa(rng.IntN(keys)) }, ttl, stop,
				hooks(id, rec, off, res, tl))
		})
	}
	mp, global := c.startMux(phase, clk, res, stop, &wg)
	var wins []*window
	for k := 0; k < phaseFaults && time.Now().Add(hold+2*settle).Before(end); k++ {
		time.Sleep(settle)
		l := c.leader(noSkip, serve)
		if l < 0 {
			global = append(global, fmt.Sprintf("no leader within %v before fault %d: the faults stop", serve, *next))
			break
		}
		w := &window{fault: *next % len(faults), node: c.nodes[l].id, start: clk.Now()}
		*next++
		wins = append(wins, w)
		c.inject(t, clk, tl, w, l)
	}
	time.Sleep(settle)
	close(stop)
	wg.Wait()
	if mp != nil {
		global = append(global, mp.finish()...)
	}
	global = append(global, c.finalReads(rec, prefix, int64(ttl/time.Second))...)
	global = append(global, c.digests()...)
	t0 := time.Now()
	lin := rec.Check(3*time.Minute, c.dir)
	for _, e := range rec.Errors() {
		global = append(global, "recorder: "+e)
	}
	switch lin.Verdict {
	case porcupine.Illegal:
		keep := filepath.Join(os.TempDir(), fmt.Sprintf("latchd-nemesis-%d", time.Now().UnixNano()))
		_ = os.MkdirAll(keep, 0o755)
		for _, f := range []string{lin.Visualization, lin.Dump} {
			if b, err := os.ReadFile(f); err == nil {
				_ = os.WriteFile(filepath.Join(keep, filepath.Base(f)), b, 0o644)
			}
		}
		global = append(global, fmt.Sprintf("phase %d: history is not linearizable, or a replica lost an acknowledged operation (kept in %s)", phase, keep))
	case porcupine.Unknown:
		global = append(global, fmt.Sprintf("phase %d: linearizability check timed out", phase))
	}
	if lin.Grants == 0 {
		global = append(global, fmt.Sprintf("phase %d: no grants: the load did not run", phase))
	}
	t.Logf("phase %d: %d operations (%d of unknown outcome), %d grants, linearizable: %v (checked in %v)",
		phase, lin.Ops, lin.Unknown, lin.Grants, lin.Verdict, time.Since(t0).Round(time.Millisecond))
	return wins, lin, global
}

// inject runs one fault: start, measure failover while it holds, heal,
// then wait until every node runs and a leader serves.
func (c *cluster) inject(t *testing.T, rec *lincheck.Recorder, tl *timeline, w *window, l int) {
	f := faults[w.fault]
	t0 := time.Now()
	heal, target, err := f.inject(c, c.topo, l)
	inPlace := rec.Now() // filling a disk, or a membership change, takes a while
	if err != nil {
		t.Fatalf("inject %s: %v", f.name, err)
	}
	if f.slowStart {
		t0 = time.Now()
	}
	w.node = c.nodes[target].id
	var healed atomic.Bool
	skip := func() int {
		if healed.Load() || target != l || f.keeps {
			return -1
		}
		return target
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if j := c.leader(skip, hold+serve); j >= 0 {
			w.failover, w.served = time.Since(t0), true
		}
	}()
	time.Sleep(hold)
	exited := !c.nodes[target].alive() && !f.kills
	if err := heal(); err != nil {
		t.Fatalf("heal %s: %v", f.name, err)
	}
	healed.Store(true)
	<-done
	switch {
	case !w.served:
		w.notes = append(w.notes, anomaly{rec.Now(), fmt.Sprintf("%s: no grant within %v", f.name, hold+serve)})
	case target == l && !f.keeps && w.failover > hold:
		w.notes = append(w.notes, anomaly{rec.Now(), fmt.Sprintf("%s: no other node served while %s was faulty (%v): grants to requests sent in each second after the fault was in place: %v; service came back %v after the fault began, once healed",
			f.name, c.nodes[l].id, hold, tl.perSecond(inPlace, w.start+int64(hold)), w.failover.Round(time.Millisecond))})
	}
	if exited {
		t.Logf("%s: %s exited during the fault and was restarted", f.name, c.nodes[target].id)
	}
	for _, n := range c.nodes {
		if !n.alive() {
			w.notes = append(w.notes, anomaly{rec.Now(), fmt.Sprintf("%s: %s exited on its own", f.name, n.id)})
			c.start(n)
		}
	}
	if c.leader(noSkip, serve) < 0 {
		w.notes = append(w.notes, anomaly{rec.Now(), fmt.Sprintf("%s: no leader served within %v of heal", f.name, serve)})
	}
	for _, n := range c.takeNotes() {
		w.notes = append(w.notes, anomaly{rec.Now(), f.name + ": " + n})
	}
	t.Logf("%-32s on %s: failover %v", f.name, w.node, w.failover.Round(time.Millisecond))
}

func (c *cluster) addrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.addr())
	}
	return out
}
