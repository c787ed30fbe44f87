//go:build nemesis

package nemesis

import (
	"fmt"
	"math/rand/v2"
	"os"
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
	return 90 * time.Second
}

// setup makes the topology and starts the cluster, or skips the test
// when this machine cannot make namespaces.
func setup(t *testing.T) *cluster {
	if os.Geteuid() != 0 {
		t.Skip("nemesis: skipped, needs root to create network namespaces")
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
	c := newCluster(t, tp, buildLatchd(t, dir), dir, dial)
	c.topo = tp
	if c.leader(noSkip, 20*time.Second) < 0 {
		t.Fatal("no leader within 20s of start")
	}
	return c
}

func TestNemesis(t *testing.T) {
	d := duration()
	c := setup(t)
	rec, res, tl := lincheck.NewRecorder(), newResource(), &timeline{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range workers {
		rng := rand.New(rand.NewPCG(uint64(id), 29))
		lc := lincheck.NewClient(c.addrs(), id)
		lc.Dial = c.dial.Dial
		wg.Go(func() {
			lincheck.Worker(id, lc, rec, func() string { return "k" + strconv.Itoa(rng.IntN(keys)) }, d+time.Hour, stop,
				hooks(id, rec, res, tl))
		})
	}
	wins := c.nemesisLoop(t, rec, tl, d)
	time.Sleep(settle)
	close(stop)
	wg.Wait()

	dir := t.TempDir()
	lin := rec.Check(3*time.Minute, dir)
	var global []string
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
		global = append(global, "history is not linearizable (kept in "+keep+")")
	case porcupine.Unknown:
		global = append(global, "linearizability check timed out")
	}
	if lin.Grants == 0 {
		global = append(global, "no grants: the load did not run")
	}
	a := report(t, wins, res, tl, lin, global)
	if a > 0 {
		t.Errorf("nemesis: %d anomalies", a)
	}
}

// nemesisLoop injects the faults in turn, each held for hold and then
// healed, until d is spent, and returns what happened in each.
func (c *cluster) nemesisLoop(t *testing.T, rec *lincheck.Recorder, tl *timeline, d time.Duration) []*window {
	var wins []*window
	end := time.Now().Add(d)
	for i := 0; time.Now().Add(hold + 2*settle).Before(end); i++ {
		time.Sleep(settle)
		l := c.leader(noSkip, serve)
		if l < 0 {
			msg := fmt.Sprintf("no leader within %v before fault %d: the faults stop", serve, i)
			if len(wins) == 0 {
				t.Fatal(msg)
			}
			last := wins[len(wins)-1]
			last.notes = append(last.notes, anomaly{rec.Now(), msg})
			break
		}
		w := &window{fault: i % len(faults), node: c.nodes[l].id, start: rec.Now()}
		if len(wins) > 0 {
			wins[len(wins)-1].end = w.start
		}
		wins = append(wins, w)
		c.inject(t, rec, tl, w, l)
	}
	if len(wins) > 0 {
		wins[len(wins)-1].end = rec.Now() + int64(time.Hour)
	}
	return wins
}

// inject runs one fault: start, measure failover while it holds, heal,
// then wait until every node runs and a leader serves.
func (c *cluster) inject(t *testing.T, rec *lincheck.Recorder, tl *timeline, w *window, l int) {
	f := faults[w.fault]
	t0 := time.Now()
	heal, target, err := f.inject(c, c.topo, l)
	inPlace := rec.Now() // filling a disk takes a while
	if err != nil {
		t.Fatalf("inject %s: %v", f.name, err)
	}
	w.node = c.nodes[target].id
	var healed atomic.Bool
	skip := func() int {
		if healed.Load() || target != l {
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
	exited := !c.nodes[target].alive() && f.name != "leader kill -9, restart"
	if err := heal(); err != nil {
		t.Fatalf("heal %s: %v", f.name, err)
	}
	healed.Store(true)
	<-done
	switch {
	case !w.served:
		w.notes = append(w.notes, anomaly{rec.Now(), fmt.Sprintf("%s: no grant within %v", f.name, hold+serve)})
	case target == l && w.failover > hold:
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
	t.Logf("%-32s on %s: failover %v", f.name, w.node, w.failover.Round(time.Millisecond))
}

func (c *cluster) addrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.addr())
	}
	return out
}
