package server_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/latchd/latchd/internal/lincheck"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server"
	"github.com/latchd/latchd/server/servertest"
)

// A linearizability check of lock operations across a leader crash: many
// clients try-lock, renew and release a few keys through whichever node
// leads, the leader is killed and restarted mid-run, and porcupine checks
// the recorded history (see internal/lincheck for the model).
//
// With one event loop the leader writes its answers as a task on the
// loop (answers.go); with two, from the goroutine that applied them.
func TestClusterLinearizableAcrossFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster load test")
	}
	for _, loops := range []int{1, 2} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) { clusterLinearizableAcrossFailover(t, loops) })
	}
}

func clusterLinearizableAcrossFailover(t *testing.T, loops int) {
	// No release on disconnect: every state change is a recorded one.
	c := servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{ServerEdit: func(sc *server.Config) {
		sc.AutoRelease = false
		sc.EventLoops = loops
	}})
	li := c.Leader(servertest.LeaderTimeout)
	var addrs []string
	for _, m := range c.Members() {
		addrs = append(addrs, m.Addr)
	}
	rec := lincheck.NewRecorder()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range 12 {
		rng := rand.New(rand.NewPCG(uint64(id), 7))
		wg.Go(func() {
			lincheck.Worker(id, lincheck.NewClient(addrs, id), rec,
				func() string { return "k" + strconv.Itoa(rng.IntN(8)) }, 10*time.Minute, stop, lincheck.Hooks{})
		})
	}
	waitOps := func(more int) {
		n := rec.Len() + more
		testutil.Eventually(t, 20*time.Second, func() bool { return rec.Len() >= n },
			fmt.Sprintf("fewer than %d operations recorded", n))
	}
	waitOps(300)
	c.Stop(li) // as the clients see it, a crash
	nl := c.Leader(servertest.LeaderTimeout)
	waitOps(300)
	c.Restart(li)
	waitOps(300)
	close(stop)
	wg.Wait()

	for _, e := range rec.Errors() {
		t.Error(e)
	}
	res := rec.Check(60*time.Second, t.TempDir())
	t.Logf("%d operations, %d grants, %d of unknown outcome; leader %s then %s: %v",
		res.Ops, res.Grants, res.Unknown, c.Members()[li].ID, c.Members()[nl].ID, res.Verdict)
	switch res.Verdict {
	case porcupine.Illegal:
		t.Fatalf("history is not linearizable (visualization: %s, the key's history: %s)", res.Visualization, res.Dump)
	case porcupine.Unknown:
		t.Fatalf("linearizability check timed out")
	}
}

// The model must reject what a broken lock service would do, or the check
// above could not fail.
func TestLockModelRejectsBrokenHistories(t *testing.T) {
	type in = lincheck.Input
	type out = lincheck.Output
	op := func(c, r int64, i in, o out) porcupine.Operation {
		return porcupine.Operation{Input: i, Call: c, Output: o, Return: r}
	}
	grantA := out{OK: true, Token: "a", Fence: 5}
	for name, h := range map[string][]porcupine.Operation{
		"two holders": {
			op(0, 1, in{Op: 'l', Key: "k", Token: "1"}, grantA),
			op(2, 3, in{Op: 'l', Key: "k", Token: "2"}, out{OK: true, Token: "b", Fence: 6}),
		},
		"fence not rising": {
			op(0, 1, in{Op: 'l', Key: "k", Token: "1"}, grantA),
			op(2, 3, in{Op: 'r', Key: "k", Token: "a"}, out{OK: true}),
			op(4, 5, in{Op: 'l', Key: "k", Token: "2"}, out{OK: true, Token: "b", Fence: 5}),
		},
		"free lock refused": {
			op(0, 1, in{Op: 'l', Key: "k", Token: "1"}, out{}),
		},
		"stale release accepted": {
			op(0, 1, in{Op: 'l', Key: "k", Token: "1"}, grantA),
			op(2, 3, in{Op: 'r', Key: "k", Token: "a"}, out{OK: true}),
			op(4, 5, in{Op: 'r', Key: "k", Token: "a"}, out{OK: true}),
		},
	} {
		if porcupine.CheckOperations(lincheck.Model.ToModel(), h) {
			t.Errorf("%s: accepted as linearizable", name)
		}
	}
	ok := []porcupine.Operation{
		op(0, 1, in{Op: 'l', Key: "k", Token: "1"}, grantA),
		op(2, 9, in{Op: 'r', Key: "k", Token: "a"}, out{Unknown: true}),
		op(3, 4, in{Op: 'l', Key: "k", Token: "2"}, out{OK: true, Token: "b", Fence: 9}),
	}
	if !porcupine.CheckOperations(lincheck.Model.ToModel(), ok) {
		t.Errorf("a release of unknown outcome followed by a grant was rejected")
	}
}
