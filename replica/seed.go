package replica

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"
)

// Seeding a new cluster's raft dir from a backup (latchd --restore).
//
// What a restore brings back is the fence counter: the new cluster starts
// with no holder, waiter or session, and issues every fence above the
// backup's highest. A holder of the lost cluster still at work finds out
// at its next renewal, and fenced resources refuse it (docs/cluster.md).

// errNeedBootstrap refuses to seed a node without the new cluster's
// configuration.
var errNeedBootstrap = errors.New("replica: a restore seeds a new cluster: it needs Bootstrap and the new cluster's Peers")

// restoredFile marks a raft dir seeded from a backup: the backup's
// checksum, so that a restart with the same --restore starts from the
// directory instead of refusing it.
const restoredFile = "RESTORED"

// Seed is what SeedRaftDir writes: the backup's index and fence floor,
// and its checksum (BackupInfo).
type Seed struct {
	Index, Floor uint64
	Sum          string
}

// SeedRaftDir makes cfg.RaftDir the first state of a new cluster seeded
// from a backup: a snapshot after the backup's index (term 1) with
// cfg.Peers as the voters (cfg.Bootstrap is required) and an empty state
// whose fence counter is s.Floor. Every node may be seeded alike, or one
// alone with the others joining it.
//
// A directory that holds anything of raft is refused unless force, which
// deletes it first; one already seeded from this backup (a restart with
// the same --restore) is left as it is, and SeedRaftDir reports false.
func SeedRaftDir(cfg Config, s Seed, force bool) (bool, error) {
	if !cfg.Bootstrap || cfg.RaftDir == "" {
		return false, errNeedBootstrap
	}
	dir := cfg.RaftDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("replica: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false, fmt.Errorf("replica: %w", err)
	}
	defer func() { _ = lock.Close() }() // releases the flock
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, fmt.Errorf("replica: raft dir %s is in use by another process: %w", dir, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, restoredFile)); err == nil && string(bytes.TrimSpace(b)) == s.Sum {
		return false, nil
	}
	held, err := raftDirContents(dir)
	if err != nil {
		return false, err
	}
	if len(held) > 0 {
		if !force {
			return false, fmt.Errorf("replica: raft dir %s is not empty (it holds %s): a restore seeds a new node only; "+
				"move the directory aside, or delete what it holds with latchd --restore-force", dir, strings.Join(held, ", "))
		}
		for _, name := range []string{"wal", "snap", "hardstate", restoredFile} {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return false, fmt.Errorf("replica: %w", err)
			}
		}
	}
	mark, err := checkFormat(dir)
	if err != nil {
		return false, err
	}
	snap, err := seedSnapshot(cfg, s)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "snap"), 0o700); err != nil {
		return false, fmt.Errorf("replica: %w", err)
	}
	st := Storage{dir: dir, format: mark}
	if err := st.saveSnapshot(snap, cfg.SnapshotRetain); err != nil {
		return false, fmt.Errorf("replica: seed snapshot: %w", err)
	}
	if err := writeFileSync(filepath.Join(dir, restoredFile), []byte(s.Sum+"\n")); err != nil {
		return false, fmt.Errorf("replica: %w", err)
	}
	return true, nil
}

// raftDirContents names what dir holds of a raft node's state.
func raftDirContents(dir string) ([]string, error) {
	var held []string
	for _, sub := range []string{"wal", "snap"} {
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("replica: %w", err)
		}
		if len(ents) > 0 {
			held = append(held, fmt.Sprintf("%d file(s) in %s/", len(ents), sub))
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "hardstate")); err == nil && fi.Size() > 0 {
		held = append(held, "a hardstate")
	}
	for _, old := range []string{"raft.db", "snapshots"} {
		if _, err := os.Stat(filepath.Join(dir, old)); err == nil {
			held = append(held, old)
		}
	}
	return held, nil
}

// seedSnapshot is the snapshot a seeded node starts from.
func seedSnapshot(cfg Config, s Seed) (*raftpb.Snapshot, error) {
	f, err := NewFSM(cfg.Engine, 0)
	if err != nil {
		return nil, err
	}
	// Never index 1: a bootstrapping node's empty first snapshot is at
	// index 1, term 1, and raft would take the two for the same.
	idx := max(s.Index, 1) + 1
	f.Engine().RaiseFence(s.Floor)
	f.index.Store(idx)
	peers := slices.Clone(cfg.Peers)
	slices.SortFunc(peers, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	cs := &raftpb.ConfState{}
	book := make(map[uint64]Member)
	for _, p := range peers {
		id := raftID(p.ID)
		cs.Voters = append(cs.Voters, id)
		book[id] = Member{ID: p.ID, RaftAddr: p.RaftAddr, Suffrage: "voter"}
	}
	data := f.appendState(appendSnapHeader(nil, book))
	return &raftpb.Snapshot{Data: data,
		Metadata: &raftpb.SnapshotMetadata{ConfState: cs, Index: new(idx), Term: new(uint64(1))}}, nil
}
