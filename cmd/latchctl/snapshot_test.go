package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/httpfast"
	"github.com/latchd/latchd/internal/backupfile"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/internal/testport"
	"github.com/latchd/latchd/replica"
	"github.com/latchd/latchd/server/servertest"
)

// startSnapshotCluster starts a 3-node cluster whose nodes serve REST with
// the admin API and the snapshot route.
func startSnapshotCluster(t *testing.T) *servertest.Cluster {
	t.Helper()
	return servertest.StartClusterOpts(t, 3, servertest.ClusterOptions{
		HTTP: func(tb testing.TB, m *servertest.Member) func(context.Context) error {
			cfg := httpfast.DefaultConfig()
			cfg.Addr = m.HTTPAddr
			srv, err := httpfast.New(cfg, m.Node, zap.NewNop(), httpfast.WithAdmin(m.Node, testAdminToken),
				httpfast.WithSnapshot(m.Node.Backup, testAdminToken))
			if err != nil {
				tb.Fatalf("httpfast.New(%s): %v", m.ID, err)
			}
			if err := srv.Start(); err != nil {
				tb.Fatalf("httpfast Start(%s): %v", m.ID, err)
			}
			return srv.Stop
		},
	})
}

// tokenFile writes the test admin token to a file and returns its path.
func tokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(p, []byte(testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSnapshotSaveCluster: snapshot save, pointed at a dead address and a
// follower, writes a backup that holds a lock taken over TCP before it
// (its raft index and highest fence in the header); snapshot status
// reads it back; a damaged copy is refused, naming the file.
func TestSnapshotSaveCluster(t *testing.T) {
	c := startSnapshotCluster(t)
	ms := c.Members()
	li := c.Leader(servertest.LeaderTimeout)
	follower := ms[(li+1)%3]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, ms[li].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lease, err := conn.Acquire(ctx, "backed-up", 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tf := tokenFile(t)
	file := filepath.Join(t.TempDir(), "cluster.backup")
	code, out, errOut := runCtl(t, nil, 60*time.Second, "snapshot", "save", file,
		"--http", "127.0.0.1:1,"+follower.HTTPAddr, "--admin-token-file", tf)
	if code != 0 || !strings.Contains(out, "saved "+file) || !strings.Contains(out, "from http://"+follower.HTTPAddr) {
		t.Fatalf("snapshot save: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	info, err := replica.ReadBackup(file)
	if err != nil {
		t.Fatal(err)
	}
	if info.Fence < lease.Fence() || info.Held != 1 || info.Index == 0 {
		t.Fatalf("backup: fence %d, held %d, index %d; want >= %d, 1, > 0", info.Fence, info.Held, info.Index, lease.Fence())
	}

	code, out, _ = runCtl(t, nil, 30*time.Second, "snapshot", "status", file, "--json")
	var r snapshotReport
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Index != info.Index || r.Fence != info.Fence || r.Sum != info.Sum {
		t.Fatalf("snapshot status --json: exit %d, %s; want index %d fence %d", code, out, info.Index, info.Fence)
	}
	if code, out, _ = runCtl(t, nil, 30*time.Second, "snapshot", "status", file); code != 0 || !strings.Contains(out, "checksum ok") {
		t.Fatalf("snapshot status: exit %d, %s", code, out)
	}
	data, _ := os.ReadFile(file)
	data[len(data)/2] ^= 0x10
	bad := filepath.Join(t.TempDir(), "bad.backup")
	if err := os.WriteFile(bad, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut = runCtl(t, nil, 30*time.Second, "snapshot", "status", bad); code != 1 ||
		!strings.Contains(errOut, bad) || !strings.Contains(errOut, "checksum mismatch") {
		t.Fatalf("status of a damaged file: exit %d, stderr %q", code, errOut)
	}

	// A wrong token is refused at once, with the server's 401.
	code, _, errOut = runCtl(t, []string{"LATCHD_ADMIN_TOKEN=wrong"}, 30*time.Second, "snapshot", "save", file, "--http", follower.HTTPAddr)
	if code != 1 || !strings.Contains(errOut, "401") {
		t.Fatalf("wrong token: exit %d, stderr %q", code, errOut)
	}
}

// TestSnapshotSaveSingleNode: snapshot save on a single node writes a
// backup at index 0 holding what its clients hold; an existing file is
// replaced whole.
func TestSnapshotSaveSingleNode(t *testing.T) {
	s := servertest.StartServer(t)
	cfg := httpfast.DefaultConfig()
	cfg.Addr = testport.Free(t)
	snap := func(context.Context) ([]byte, error) { return replica.EngineBackup(s.Engine, clock.Now()), nil }
	web, err := httpfast.New(cfg, backend.NewLocal(s.Engine), zap.NewNop(), httpfast.WithSnapshot(snap, testAdminToken))
	if err != nil {
		t.Fatal(err)
	}
	if err := web.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = web.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lease, err := conn.Acquire(ctx, "k", 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "node.backup")
	if err := os.WriteFile(file, []byte("an older file"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"LATCHD_ADMIN_TOKEN=" + testAdminToken, "LATCHD_HTTP=" + cfg.Addr}
	if code, out, errOut := runCtl(t, env, 30*time.Second, "snapshot", "save", file); code != 0 || !strings.Contains(out, "raft index 0") {
		t.Fatalf("snapshot save: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := backupfile.Decode(file, data)
	if err != nil || m.Fence < lease.Fence() {
		t.Fatalf("saved file: %+v, %v; want a fence >= %d", m, err, lease.Fence())
	}
	// The cluster routes do not exist on a single node.
	code, _, errOut := runCtl(t, env, 30*time.Second, "member", "list")
	if code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("member list on a single node: exit %d, stderr %q; want 1 and 404", code, errOut)
	}
}

// Bad command lines of snapshot exit 2 before any request.
func TestSnapshotUsage(t *testing.T) {
	t.Parallel()
	env := []string{"LATCHD_ADMIN_TOKEN=x", "LATCHD_HTTP=http://127.0.0.1:1"}
	for _, args := range [][]string{
		{"snapshot"},
		{"snapshot", "save"},
		{"snapshot", "restore", "f"},
		{"snapshot", "save", "a", "b"},
		{"snapshot", "save", "f", "--json"},
	} {
		if code, _, errOut := runCtl(t, env, 30*time.Second, args...); code != 2 || errOut == "" {
			t.Errorf("latchctl %q exited %d (stderr %q), want 2 and a message", args, code, errOut)
		}
	}
}
