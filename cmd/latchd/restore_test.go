package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latchd/internal/backupfile"
	"github.com/latchd/latchd/internal/fencefile"
)

const restoreAdminToken = "restore-admin-token-for-tests"

// fenceOf returns the fence number of a 32-hex token.
func fenceOf(t *testing.T, tok string) uint64 {
	t.Helper()
	if len(tok) != 32 {
		t.Fatalf("token %q is not 32 hex", tok)
	}
	f, err := strconv.ParseUint(tok[:16], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tcpLock takes key on a new connection (kept open: the lock stays held)
// and returns the granted fence.
func tcpLock(t *testing.T, addr, key string) (*rawTCP, uint64) {
	t.Helper()
	r, err := dialTCP(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	a, err := r.do("l", key, "0 60", 5*time.Second)
	for deadline := time.Now().Add(20 * time.Second); err == nil && strings.HasPrefix(a, "error_not_leader") && time.Now().Before(deadline); {
		<-time.After(20 * time.Millisecond) // a cluster node electing itself: ask again
		if r, err = dialTCP(addr); err == nil {
			t.Cleanup(func() { _ = r.Close() })
			a, err = r.do("l", key, "0 60", 5*time.Second)
		}
	}
	f := strings.Fields(a)
	if err != nil || len(f) < 2 || f[0] != "ok" {
		t.Fatalf("l %s: %q, %v", key, a, err)
	}
	return r, fenceOf(t, f[1])
}

// restLock takes key in a new REST session and returns the granted fence.
func restLock(t *testing.T, addr, key string) uint64 {
	t.Helper()
	code, body, err := httpOnce(addr, "POST", "/v1/sessions", "", "", 5*time.Second)
	var s struct {
		SessionID string `json:"session_id"`
		Token     string `json:"token"`
	}
	if err != nil || code != 201 || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("POST /v1/sessions: %d %s %v", code, body, err)
	}
	code, body, err = httpOnce(addr, "POST", "/v1/locks/"+key, s.SessionID, `{"lease_ttl_s":60}`, 5*time.Second)
	if err != nil || code != 200 || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("POST /v1/locks/%s: %d %s %v", key, code, body, err)
	}
	return fenceOf(t, s.Token)
}

// fetchBackup is GET /v1/admin/snapshot with token; it returns the status
// and the body.
func fetchBackup(t *testing.T, addr, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/admin/snapshot", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestSaveRestoreSingleNode: a backup of a running single node, taken
// while TCP and REST clients hold locks, seeds a new node whose fences
// continue above the backup's highest (here far above the clock, from a
// fence journal), and the keys held in the backup are free in it.
func TestSaveRestoreSingleNode(t *testing.T) {
	dir := t.TempDir()
	journal := filepath.Join(dir, "fence.state")
	ahead := uint64(time.Now().Add(48 * time.Hour).UnixNano())
	j, err := fencefile.Open(journal, fencefile.WithClockFloor(ahead))
	if err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
	a := startChild(t, 0, true, "--fence-state-file", journal, "--admin-token", restoreAdminToken, "--shutdown-timeout", "1")
	a.waitReady(10 * time.Second)
	_, tcpFence := tcpLock(t, a.tcp, "tcp-key")
	restFence := restLock(t, a.http, "rest-key")

	if code, _ := fetchBackup(t, a.http, "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("GET /v1/admin/snapshot with a wrong token: %d, want 401", code)
	}
	code, data := fetchBackup(t, a.http, restoreAdminToken)
	if code != 200 {
		t.Fatalf("GET /v1/admin/snapshot: %d %s", code, data)
	}
	m, _, err := backupfile.Decode("answer", data)
	if err != nil {
		t.Fatal(err)
	}
	if m.Index != 0 || m.Fence < max(tcpFence, restFence) {
		t.Fatalf("backup: index %d, fence %d; want 0 and at least %d, %d", m.Index, m.Fence, tcpFence, restFence)
	}
	file := filepath.Join(dir, "node.backup")
	if err := backupfile.WriteFile(file, data); err != nil {
		t.Fatal(err)
	}
	a.signal(syscall.SIGTERM, 10*time.Second)

	b := startChild(t, 0, true, "--restore", file)
	b.waitReady(10 * time.Second)
	b.waitLog("restored from a backup", 5*time.Second)
	for _, key := range []string{"tcp-key", "rest-key"} {
		if _, f := tcpLock(t, b.tcp, key); f <= m.Fence {
			t.Fatalf("after the restore, %s got fence %d; want above the backup's highest %d", key, f, m.Fence)
		}
	}
	if f := restLock(t, b.http, "rest-key-2"); f <= m.Fence {
		t.Fatalf("REST fence %d after the restore; want above %d", f, m.Fence)
	}
}

// TestRestoreClusterNode: --restore seeds a new cluster node's raft dir;
// a restart with the same file starts from the dir; another backup over
// a used dir is refused, unless --restore-force.
func TestRestoreClusterNode(t *testing.T) {
	dir := t.TempDir()
	single := startChild(t, 0, true, "--admin-token", restoreAdminToken, "--shutdown-timeout", "1")
	single.waitReady(10 * time.Second)
	tcpLock(t, single.tcp, "k")
	_, data := fetchBackup(t, single.http, restoreAdminToken)
	file := filepath.Join(dir, "a.backup")
	if err := backupfile.WriteFile(file, data); err != nil {
		t.Fatal(err)
	}
	m, _, err := backupfile.Decode(file, data)
	if err != nil {
		t.Fatal(err)
	}
	single.signal(syscall.SIGTERM, 10*time.Second)

	raftDir := filepath.Join(dir, "raft")
	node := func(extra ...string) []string {
		return append([]string{"--raft-dir", raftDir, "--node-id", "n1", "--raft-addr", freePort(t), "--bootstrap"}, extra...)
	}
	c := startChild(t, 0, false, node("--restore", file)...)
	c.waitReady(20 * time.Second)
	c.waitLog("raft dir seeded from a backup", 5*time.Second)
	if _, f := tcpLock(t, c.tcp, "k"); f <= m.Fence {
		t.Fatalf("seeded cluster node: fence %d; want above the backup's %d", f, m.Fence)
	}
	c.signal(syscall.SIGTERM, 15*time.Second)

	c = startChild(t, 0, false, node("--restore", file)...)
	c.waitReady(20 * time.Second)
	c.waitLog("already seeded from this backup", 5*time.Second)
	c.signal(syscall.SIGTERM, 15*time.Second)

	// Another backup (the same state, taken later) over the used dir.
	other := filepath.Join(dir, "b.backup")
	m.Created = m.Created.Add(time.Second)
	_, body, _ := backupfile.Decode(file, data)
	if err := os.WriteFile(other, backupfile.Encode(m, body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(append(node("--restore", other), "--port", "0"), env(nil), &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "not empty") || !strings.Contains(errb.String(), raftDir) {
		t.Fatalf("restore over a used raft dir: exit %d, log %q; want 1, refused naming %s", code, errb.String(), raftDir)
	}
	c = startChild(t, 0, false, node("--restore", other, "--restore-force")...)
	c.waitReady(20 * time.Second)
	c.waitLog("raft dir seeded from a backup", 5*time.Second)
	c.signal(syscall.SIGTERM, 15*time.Second)
}

// TestRestoreRefusesBadFiles: a corrupt, truncated, foreign or
// newer-version file stops latchd at once (exit 2), with one line naming
// the file and what is wrong; so do --restore-force alone and --restore
// with --join.
func TestRestoreRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := backupfile.Encode(backupfile.Meta{Fence: 99, Created: time.Now()}, []byte("state"))
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-2] ^= 1
	version := bytes.Clone(good)
	version[len(backupfile.Magic)] = 9
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"flipped byte", []string{"--restore", write("flipped", flipped)}, "checksum mismatch"},
		{"truncated", []string{"--restore", write("cut", good[:len(good)-3])}, "truncated"},
		{"not a backup", []string{"--restore", write("other", []byte("#!/bin/sh\necho not a backup at all, but long enough\n"))}, "not a latchd backup"},
		{"newer version", []string{"--restore", write("v9", version)}, "version 9"},
		{"state unreadable", []string{"--restore", write("state", good)}, "the state inside does not read"},
		{"missing", []string{"--restore", filepath.Join(dir, "nope")}, "no such file"},
		{"force alone", []string{"--restore-force"}, "goes with --restore"},
		{"with join", []string{"--restore", "x", "--raft-dir", dir, "--node-id", "n1", "--join", "127.0.0.1:1"}, "not --join"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, env(nil), &out, &errb)
			msg := errb.String()
			if code != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and one line containing %q", code, msg, tt.want)
			}
			if tt.args[0] == "--restore" && tt.args[1] != "x" && !strings.Contains(msg, tt.args[1]) {
				t.Fatalf("stderr %q does not name %s", msg, tt.args[1])
			}
		})
	}
}
