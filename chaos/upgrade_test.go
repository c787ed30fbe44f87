package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
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
	"github.com/latchd/latchd/internal/testutil"
)

// previousRelease is the newest commit of the release before this one's
// formats: data format 1 (no segment or snapshot file headers) and
// transport 1.0 (no version in the handshake). There are no release tags
// yet; once there are, this is the last one. UPGRADE_FROM overrides it.
const previousRelease = "65c69a66c6da1ca2c86191ee8f6a4eb092ebfca7"

// buildPrevious builds latchd of commit into dir from the repository's
// history, offline (GOPROXY=off, the module cache as it is). It skips the
// test when the history, the commit or a module is not at hand.
func buildPrevious(t *testing.T, commit, dir string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("rolling upgrade: no git history here (%v): the previous release cannot be built", err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh",
		strings.TrimSpace(string(root)), commit, src)
	archive.Stderr = &stderr
	if err := archive.Run(); err != nil {
		t.Skipf("rolling upgrade: commit %s is not in this repository's history (%v): %s", commit, err, stderr.Bytes())
	}
	bin := filepath.Join(dir, "latchd-previous")
	build := exec.Command("go", "build", "-o", bin, "./cmd/latchd")
	build.Dir = src
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		if bytes.Contains(out, []byte("GOPROXY=off")) || bytes.Contains(out, []byte("module lookup disabled")) {
			t.Skipf("rolling upgrade: the previous release's modules are not in the module cache: %s", out)
		}
		t.Fatalf("build the previous release (%s): %v\n%s", commit, err, out)
	}
	return bin
}

// readyz reports whether a node's /readyz answers 200: it knows a leader
// and has applied close to the commit index.
func readyz(httpAddr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// TestRollingUpgrade runs a three-node cluster of the previous release
// under load, replaces its nodes one at a time with this release's
// binary on the same data directories (two with the graceful stop an
// operator uses, SIGTERM, one with SIGKILL, a crash midway; the raft
// handshake authenticated), and checks the whole history for
// linearizability (fences included) with porcupine. Each replaced node
// must be ready (GET /readyz) before the next is stopped, and then leads
// (a leadership transfer), so the cluster runs mixed, a new leader with
// old followers: one new node and two old, then two and one. At the end
// every data directory is of this release's format, and the previous
// release refuses to start on one.
//
// make test runs it with a short dwell per step; make upgrade with
// UPGRADE_DWELL=10s.
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("rolling upgrade: builds two binaries")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("rolling upgrade: no go toolchain to build the binaries")
	}
	dwell := env("UPGRADE_DWELL", 1500*time.Millisecond)
	commit := previousRelease
	if c := os.Getenv("UPGRADE_FROM"); c != "" {
		commit = c
	}
	dir := t.TempDir()
	oldBin := buildPrevious(t, commit, dir)
	newBin := filepath.Join(dir, "latchd")
	if out, err := exec.Command("go", "build", "-o", newBin, "../cmd/latchd").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	nodes, https := startNodes(t, dir, oldBin)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	waitReady(t, https, 15*time.Second)

	rec := lincheck.NewRecorder()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const workers, keys = 12, 12
	for id := range workers {
		rng := rand.New(rand.NewPCG(uint64(id), 17))
		wg.Go(func() {
			lincheck.Worker(id, lincheck.NewClient(addrs, id), rec,
				func() string { return "k" + strconv.Itoa(rng.IntN(keys)) }, time.Hour, stop, lincheck.Hooks{})
		})
	}
	time.Sleep(dwell) // load on the old cluster: a duration of the run, not a wait for a condition
	for i, n := range nodes {
		before := rec.Len()
		if i == 1 {
			n.kill()
		} else {
			n.stop()
		}
		n.start(t, newBin)
		waitReady(t, https[i:i+1], 20*time.Second)
		waitReady(t, https, 20*time.Second)
		// The new node leads the old ones for a while: the log and the
		// transport must work both ways between the releases.
		transferTo(t, https, n)
		waitReady(t, https, 20*time.Second)
		time.Sleep(dwell) // load on the mixed cluster
		t.Logf("%s replaced (%s); %d operations meanwhile", n.id, map[bool]string{true: "SIGKILL", false: "SIGTERM"}[i == 1], rec.Len()-before)
	}
	close(stop)
	wg.Wait()

	for _, e := range rec.Errors() {
		t.Error(e)
	}
	res := rec.Check(2*time.Minute, dir)
	fmt.Printf("upgrade: from %.12s, 3 nodes replaced one at a time under %d workers on %d keys, %v per step\n",
		commit, workers, keys, dwell)
	fmt.Printf("upgrade: %d operations, %d grants, %d of unknown outcome; linearizable: %v\n",
		res.Ops, res.Grants, res.Unknown, res.Verdict)
	switch {
	case res.Verdict == porcupine.Illegal:
		t.Fatalf("history is not linearizable (%s, %s)", res.Visualization, res.Dump)
	case res.Verdict == porcupine.Unknown:
		t.Fatal("linearizability check timed out")
	case res.Grants == 0:
		t.Fatal("no grants: the load did not run")
	}
	for _, n := range nodes {
		if b, _ := os.ReadFile(filepath.Join(n.dir, "FORMAT")); string(b) != "latchd etcd-raft 2\n" {
			t.Errorf("%s: FORMAT %q after the upgrade; want data format 2", n.id, b)
		}
	}
	refuseDowngrade(t, nodes[0], oldBin)
}

// startNodes starts three bootstrapping nodes of bin in dir and returns
// them with their REST addresses.
func startNodes(t *testing.T, dir, bin string) ([]*node, []string) {
	t.Helper()
	nodes := make([]*node, 3)
	https := make([]string, 3)
	var peers []string
	for i := range nodes {
		n := &node{id: fmt.Sprint("n", i+1), addr: testport.Free(t), raft: testport.Free(t),
			dir: filepath.Join(dir, fmt.Sprint("n", i+1))}
		nodes[i], https[i] = n, testport.Free(t)
		peers = append(peers, n.id+"="+n.raft+"="+n.addr)
	}
	token := filepath.Join(dir, "raft.token") // the raft handshake of both releases, authenticated
	if err := os.WriteFile(token, []byte("upgrade-test-raft-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		host, port, _ := net.SplitHostPort(n.addr)
		_, hport, _ := net.SplitHostPort(https[i])
		n.args = []string{"--host", host, "--port", port, "--http-port", hport, "--raft-dir", n.dir, "--node-id", n.id,
			"--raft-addr", n.raft, "--bootstrap", "--cluster-peers", strings.Join(peers, ","),
			"--auto-release-on-disconnect=false", "--shutdown-timeout", "1", "--admin-token", upgradeAdminToken, "--raft-auth-token-file", token, "--log-level", "warn", "--raft-log-level", "warn"}
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
	return nodes, https
}

// upgradeAdminToken is the admin token the test's nodes serve.
const upgradeAdminToken = "upgrade-test-admin-token"

// transferTo has the leader hand leadership to n, asking each node in
// turn (a follower answers 503 not_leader), until n answers as leader.
func transferTo(t *testing.T, https []string, n *node) {
	t.Helper()
	try := 0
	testutil.Eventually(t, 30*time.Second, func() bool {
		try++
		if probe(n.addr, "upgrade-probe-"+n.id+strconv.Itoa(try)) {
			return true
		}
		for _, a := range https {
			req, _ := http.NewRequest(http.MethodPost, "http://"+a+"/v1/admin/leadership-transfer",
				strings.NewReader(`{"id":"`+n.id+`"}`))
			req.Header.Set("Authorization", "Bearer "+upgradeAdminToken)
			resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
		}
		return false
	}, "leadership handed to "+n.id)
}

// waitReady waits until every one of the REST addresses answers /readyz.
func waitReady(t *testing.T, https []string, d time.Duration) {
	t.Helper()
	testutil.Eventually(t, d, func() bool {
		for _, a := range https {
			if !readyz(a) {
				return false
			}
		}
		return true
	}, fmt.Sprintf("nodes %v ready", https))
}

// refuseDowngrade stops n and checks that the previous release refuses
// its data directory, now of format 2, at start, naming FORMAT.
func refuseDowngrade(t *testing.T, n *node, oldBin string) {
	t.Helper()
	n.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, oldBin, n.args...).CombinedOutput()
	if err == nil || ctx.Err() != nil || !bytes.Contains(out, []byte("FORMAT")) {
		t.Fatalf("the previous release on an upgraded directory: %v, %s; want a refusal naming FORMAT", err, out)
	}
}
