package replica

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/backupfile"
)

// backupOf takes a backup on n and writes it to a file, returning the
// file's path and what ReadBackup finds in it.
func backupOf(t *testing.T, n *Node) (string, BackupInfo) {
	t.Helper()
	data, err := n.Backup(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("Backup on %s: %v", n.ID(), err)
	}
	path := filepath.Join(t.TempDir(), "latchd.backup")
	if err := backupfile.WriteFile(path, data); err != nil {
		t.Fatal(err)
	}
	info, err := ReadBackup(path)
	if err != nil {
		t.Fatalf("ReadBackup: %v", err)
	}
	return path, info
}

// seeded returns an edit for newCluster that seeds every bootstrapping
// node's raft dir from info, as latchd --restore does.
func seeded(t *testing.T, info BackupInfo, onlyNode string) func(*Config) {
	return func(cfg *Config) {
		if !cfg.Bootstrap || (onlyNode != "" && cfg.NodeID != onlyNode) {
			return
		}
		ok, err := SeedRaftDir(*cfg, Seed{Index: info.Index, Floor: info.Floor, Sum: info.Sum}, false)
		if err != nil || !ok {
			t.Fatalf("SeedRaftDir(%s) = %v, %v; want seeded", cfg.NodeID, ok, err)
		}
	}
}

// TestBackupRestoreFencesAbove: a backup taken on a follower of a running
// 3-node cluster, with locks held, holds every acknowledged grant; a new
// 3-node cluster seeded from it issues fences above the backup's highest,
// even when that is far above the clock (so the clock alone would not),
// and the keys held in the backup are free in it.
func TestBackupRestoreFencesAbove(t *testing.T) {
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixNano())
	old := newCluster(t, 3, func(cfg *Config) { cfg.FenceFloor = ahead })
	l := old.leader(t)
	var last fence.Token
	for i := range 5 {
		last = grantOn(t, l, "a", engine.OwnerID(i+1))
		if err := l.Release(ctxT(t, 10*time.Second), []byte("a"), last); err != nil {
			t.Fatal(err)
		}
	}
	held := grantOn(t, l, "b", 9)
	var follower *Node
	for _, n := range old.live() {
		if n != l {
			follower = n
		}
	}
	path, info := backupOf(t, follower)
	if info.Fence < held.Fence || info.Floor < held.Fence || info.Held != 1 {
		t.Fatalf("backup on a follower: fence %d, floor %d, held %d; want >= the last acknowledged grant %d, and 1 held",
			info.Fence, info.Floor, info.Held, held.Fence)
	}
	if info.Index == 0 {
		t.Fatalf("backup index 0; want the follower's applied index")
	}
	old.shutdown()

	fresh := newCluster(t, 3, seeded(t, info, ""))
	nl := fresh.leader(t)
	for _, key := range []string{"a", "b"} {
		tok := grantOn(t, nl, key, 1)
		if tok.Fence <= info.Floor {
			t.Fatalf("restored cluster's grant of %s: fence %d; want above the backup's highest %d (%s)", key, tok.Fence, info.Floor, path)
		}
	}
	if got := nl.FSM().AppliedIndex(); got <= info.Index {
		t.Fatalf("restored cluster's applied index %d; want past the backup's %d", got, info.Index)
	}
	waitSame(t, fresh.live()...)
}

// TestRestoreOneNodeOthersJoin: one node seeded from a backup as a
// cluster of itself, and two empty nodes added to it, all carry the
// backup's fence floor (they get it in the leader's snapshot).
func TestRestoreOneNodeOthersJoin(t *testing.T) {
	src := newCluster(t, 1, func(cfg *Config) { cfg.FenceFloor = uint64(time.Now().Add(time.Hour).UnixNano()) })
	grantOn(t, src.leader(t), "k", 1)
	_, info := backupOf(t, src.leader(t))
	src.shutdown()

	c := newCluster(t, 1, seeded(t, info, ""))
	c.addNode(t)
	c.addNode(t)
	waitSame(t, c.live()...)
	for _, n := range c.live() {
		if got := n.FSM().Engine().LastFence(); got < info.Floor {
			t.Fatalf("%s: fence counter %d; want at least the backup's %d", n.ID(), got, info.Floor)
		}
	}
	if tok := grantOn(t, c.leader(t), "k", 2); tok.Fence <= info.Floor {
		t.Fatalf("fence %d; want above %d", tok.Fence, info.Floor)
	}
}

// TestSeedRaftDirRefusesNonEmpty: a raft dir that holds a node's state is
// refused, naming the directory and what it holds; force deletes it. A
// dir seeded from the same backup is left as it is (a restart with the
// same --restore).
func TestSeedRaftDirRefusesNonEmpty(t *testing.T) {
	c := newCluster(t, 1, nil)
	grantOn(t, c.leader(t), "k", 1)
	cfg := testConfig("n0")
	cfg.Bootstrap, cfg.Peers = true, []Peer{{ID: "n0", RaftAddr: c.raftAddr(0)}}
	cfg.RaftDir = c.nodes[0].st.dir
	c.shutdown()
	s := Seed{Index: 7, Floor: 1 << 60, Sum: "aaaa"}
	_, err := SeedRaftDir(cfg, s, false)
	if err == nil || !strings.Contains(err.Error(), cfg.RaftDir) || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("seeding a used raft dir: %v; want refused, naming %s", err, cfg.RaftDir)
	}
	if ok, err := SeedRaftDir(cfg, s, true); !ok || err != nil {
		t.Fatalf("forced seed: %v, %v", ok, err)
	}
	if ok, err := SeedRaftDir(cfg, s, false); ok || err != nil {
		t.Fatalf("seeding again from the same backup: %v, %v; want left as it is", ok, err)
	}
	s.Sum = "bbbb"
	if _, err := SeedRaftDir(cfg, s, false); err == nil {
		t.Fatal("seeding from another backup over a seeded dir: no error")
	}
	cfg.Bootstrap = false
	if _, err := SeedRaftDir(cfg, s, true); !errors.Is(err, errNeedBootstrap) {
		t.Fatalf("seeding without bootstrap: %v", err)
	}
}

// TestReadBackupRefusesDamage: a backup with a flipped byte anywhere, cut
// short anywhere, or with another magic or version is refused with an
// error that names the file.
func TestReadBackupRefusesDamage(t *testing.T) {
	c := newCluster(t, 1, nil)
	grantOn(t, c.leader(t), "k", 1)
	path, _ := backupOf(t, c.leader(t))
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.backup")
	try := func(what string, data []byte) {
		t.Helper()
		if err := os.WriteFile(bad, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := ReadBackup(bad)
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Fatalf("%s: ReadBackup = %v; want an error naming %s", what, err, bad)
		}
	}
	for _, at := range []int{0, 9, 13, 20, 30, 45, 50, backupfile.HeaderSize + 1, len(good) / 2, len(good) - 1} {
		b := append([]byte(nil), good...)
		b[at] ^= 0x40
		try("byte flipped at "+strconv.Itoa(at), b)
	}
	for _, n := range []int{0, 4, backupfile.HeaderSize - 1, backupfile.HeaderSize, len(good) - 1} {
		try("cut at "+strconv.Itoa(n), good[:n])
	}
	try("a byte added", append(append([]byte(nil), good...), 0))
}

// TestEngineBackupUnderLoad: a single node's backup, taken while other
// goroutines grant and release, reads back whole, and its fence floor is
// at least every fence granted before it was taken.
func TestEngineBackupUnderLoad(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.FenceSeed = 1000
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := []byte{'k', byte('a' + i%20)}
			out, err := e.Acquire(int64(i), engine.AcquireReq{Key: key, Owner: engine.OwnerID(i%7 + 1), Limit: 1, TTL: time.Minute, Salt: 1}, nil)
			if err == nil && out.Result == engine.Granted && i%3 != 0 {
				_ = e.Release(int64(i), key, out.Token)
			}
		}
	}()
	dir := t.TempDir()
	for i := range 20 {
		before := e.LastFence()
		path := filepath.Join(dir, "b"+strconv.Itoa(i))
		if err := backupfile.WriteFile(path, EngineBackup(e, 5)); err != nil {
			t.Fatal(err)
		}
		info, err := ReadBackup(path)
		if err != nil {
			t.Fatalf("backup %d under load: %v", i, err)
		}
		if info.Floor < before || info.Index != 0 {
			t.Fatalf("backup %d: floor %d, index %d; want >= %d, 0", i, info.Floor, info.Index, before)
		}
	}
	close(stop)
	<-done
}
