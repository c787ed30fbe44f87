//go:build chaos

package chaos

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/latchd/latchd/internal/lincheck"
	"github.com/latchd/latchd/internal/testport"
)

func TestChaos(t *testing.T) {
	duration := env("CHAOS_DURATION", 40*time.Second)
	every := env("CHAOS_KILL_EVERY", 4*time.Second)
	dir := t.TempDir()
	bin := filepath.Join(dir, "latchd")
	build := exec.Command("go", "build", "-o", bin, "../cmd/latchd")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build: %v", err)
	}
	nodes := make([]*node, 3)
	var peers []string
	for i := range nodes {
		n := &node{id: fmt.Sprint("n", i+1), addr: testport.Free(t), raft: testport.Free(t),
			dir: filepath.Join(dir, fmt.Sprint("n", i+1))}
		nodes[i] = n
		peers = append(peers, n.id+"="+n.raft+"="+n.addr)
	}
	for _, n := range nodes {
		host, port, _ := net.SplitHostPort(n.addr)
		n.args = []string{"--host", host, "--port", port, "--raft-dir", n.dir, "--node-id", n.id,
			"--raft-addr", n.raft, "--bootstrap", "--cluster-peers", strings.Join(peers, ","),
			"--auto-release-on-disconnect=false", "--log-level", "warn", "--raft-log-level", "warn"}
		f, err := os.Create(filepath.Join(dir, n.id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		n.log = f
		n.start(t, bin)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
			_ = n.log.Close()
			if t.Failed() {
				b, _ := os.ReadFile(n.log.Name())
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("%s log (tail):\n%s", n.id, b)
			}
		}
	})
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	leader := func(timeout time.Duration) (int, time.Duration) {
		start := time.Now()
		for i := 0; time.Since(start) < timeout; i++ {
			for j, n := range nodes {
				if n.alive() && probe(n.addr, "chaos-probe-"+strconv.Itoa(i)) {
					return j, time.Since(start)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		return -1, time.Since(start)
	}
	if li, _ := leader(15 * time.Second); li < 0 {
		t.Fatalf("no leader within 15s")
	}

	rec := lincheck.NewRecorder()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const workers, keys = 16, 16
	for id := range workers {
		rng := rand.New(rand.NewPCG(uint64(id), 11))
		wg.Go(func() {
			lincheck.Worker(id, lincheck.NewClient(addrs, id), rec,
				func() string { return "k" + strconv.Itoa(rng.IntN(keys)) }, duration+time.Hour, stop, lincheck.Hooks{})
		})
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	var (
		kills, leaderKills int
		failovers          []time.Duration
	)
	end := time.Now().Add(duration)
	for time.Now().Add(every).Before(end) {
		time.Sleep(every / 2)
		li, _ := leader(10 * time.Second)
		if li < 0 {
			t.Fatalf("no leader within 10s (after %d kills)", kills)
		}
		victim := li // every other kill takes the leader
		if kills%2 == 1 {
			victim = (li + 1 + rng.IntN(2)) % 3
		}
		nodes[victim].kill()
		kills++
		if victim == li {
			leaderKills++
			nl, took := leader(10 * time.Second)
			if nl < 0 {
				t.Fatalf("no new leader served within 10s of killing leader %s", nodes[victim].id)
			}
			failovers = append(failovers, took)
			t.Logf("killed leader %s: a new leader served after %v", nodes[victim].id, took.Round(time.Millisecond))
		} else {
			t.Logf("killed follower %s", nodes[victim].id)
		}
		time.Sleep(every / 2)
		nodes[victim].start(t, bin)
		for _, n := range nodes {
			if !n.alive() {
				t.Fatalf("%s exited on its own", n.id)
			}
		}
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	for _, e := range rec.Errors() {
		t.Error(e)
	}
	res := rec.Check(2*time.Minute, dir)
	var worst, sum time.Duration
	for _, d := range failovers {
		worst = max(worst, d)
		sum += d
	}
	mean := time.Duration(0)
	if len(failovers) > 0 {
		mean = sum / time.Duration(len(failovers))
	}
	fmt.Printf("chaos: %v, 3 nodes, %d workers on %d keys\n", duration, workers, keys)
	fmt.Printf("chaos: kill -9 x%d (%d leaders, %d followers), each restarted\n", kills, leaderKills, kills-leaderKills)
	fmt.Printf("chaos: failover (leader killed -> a new leader serves): mean %v, worst %v\n",
		mean.Round(time.Millisecond), worst.Round(time.Millisecond))
	fmt.Printf("chaos: %d operations, %d grants, %d of unknown outcome; linearizable: %v\n",
		res.Ops, res.Grants, res.Unknown, res.Verdict)
	switch res.Verdict {
	case porcupine.Illegal:
		keep := filepath.Join(os.TempDir(), fmt.Sprintf("latchd-chaos-%d", time.Now().UnixNano()))
		_ = os.MkdirAll(keep, 0o755)
		for _, f := range []string{res.Visualization, res.Dump} {
			if b, err := os.ReadFile(f); err == nil {
				_ = os.WriteFile(filepath.Join(keep, filepath.Base(f)), b, 0o644)
			}
		}
		t.Fatalf("history is not linearizable (kept in %s)", keep)
	case porcupine.Unknown:
		t.Fatalf("linearizability check timed out")
	}
	if res.Grants == 0 {
		t.Fatalf("no grants: the load did not run")
	}
}
