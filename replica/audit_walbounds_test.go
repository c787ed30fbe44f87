package replica

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// resegment rewrites the log in raftDir/wal into segments of about size
// bytes, entry for entry from the first at or after from, as a
// long-running node's log of many segments, compacted behind its newest
// snapshot, holds it.
func resegment(t *testing.T, raftDir string, size int64, from uint64) {
	t.Helper()
	dir := filepath.Join(raftDir, "wal")
	old, err := OpenWAL(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	var recs []walRecord
	for i := max(from, old.FirstIndex()); i <= old.LastIndex(); i++ {
		r, err := old.Get(i)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWAL(dir, size)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs { // one write each: a segment fills up to about size
		if err := w.Append([]walRecord{r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// walSegmentInfo is one segment file: its path, bytes and records.
type walSegmentInfo struct {
	name  string
	first uint64
	data  []byte
	offs  []int
	end   int
}

func walSegments(t *testing.T, raftDir string) []walSegmentInfo {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(raftDir, "wal", "*"+walExt))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	var out []walSegmentInfo
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		s := walSegmentInfo{name: name, first: segmentFirst(t, name), data: data}
		s.offs, s.end = recordOffsets(data, s.first)
		out = append(out, s)
	}
	return out
}

// recordOf returns the segment holding entry index and the record's
// offset and end in it.
func recordOf(t *testing.T, segs []walSegmentInfo, index uint64) (walSegmentInfo, int, int) {
	t.Helper()
	for _, s := range segs {
		if k := index - s.first; index >= s.first && k < uint64(len(s.offs)) {
			end := s.end
			if int(k)+1 < len(s.offs) {
				end = s.offs[k+1]
			}
			return s, s.offs[k], end
		}
	}
	t.Fatalf("no segment holds entry %d", index)
	return walSegmentInfo{}, 0, 0
}

// TestAudit_CorruptWALAtBoundaries: a node whose log spans many segments
// after snapshots is damaged where the files meet: in a middle segment,
// at the last record of a segment and the first of the next, at the first
// entry after the newest snapshot, in the snapshot itself, and in the
// hard state. It never starts with a committed entry missing: it refuses,
// naming the file and the byte, with the files left as they were, or it
// starts with every committed entry and every lock.
func TestAudit_CorruptWALAtBoundaries(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) {
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 24
	})
	const locks = 60
	grantLocks(t, c.leader(t), locks)
	cfg := c.nodes[0].cfg
	c.kill(t, 0)
	commit := diskCommit(t, cfg.RaftDir)
	snaps, err := indexedFiles(filepath.Join(cfg.RaftDir, "snap"), snapFileExt)
	if err != nil || len(snaps) < 2 || snaps[len(snaps)-2]+5 >= snaps[len(snaps)-1] {
		t.Fatalf("snapshots %v, %v; want two, apart", snaps, err)
	}
	// The log keeps a few entries behind the newest snapshot, none of
	// those right after the older one.
	resegment(t, cfg.RaftDir, 256, snaps[len(snaps)-1]-4)
	segs := walSegments(t, cfg.RaftDir)
	if len(segs) < 4 {
		t.Fatalf("%d segments; want several", len(segs))
	}
	snapIndex := snaps[len(snaps)-1]
	if segs[0].first > snapIndex+1 || snapIndex >= commit {
		t.Fatalf("log from %d, snapshot at %d, commit %d: want the log to go on past the snapshot", segs[0].first, snapIndex, commit)
	}
	mid := segs[len(segs)/2]
	afterSnap, asOff, asEnd := recordOf(t, segs, snapIndex+1)
	lastOfMid := mid.offs[len(mid.offs)-1]
	newest := segs[len(segs)-1]
	if len(newest.offs) < 2 {
		newest = segs[len(segs)-2] // its first record must have intact ones after it
	}
	rel := func(p string) string { r, _ := filepath.Rel(cfg.RaftDir, p); return r }
	cases := map[string]damage{
		"middle segment":             {rel(mid.name), (mid.offs[1] + mid.offs[2]) / 2, mid.offs[1]},
		"last record of a segment":   {rel(mid.name), (lastOfMid + mid.end) / 2, lastOfMid},
		"first record of a segment":  {rel(newest.name), newest.offs[0] + walHeaderSize + 2, newest.offs[0]},
		"first entry after snapshot": {rel(afterSnap.name), (asOff + asEnd) / 2, asOff},
		"hard state":                 {"hardstate", 5, -1},
		"newest snapshot":            {filepath.Join("snap", filepath.Base(indexedPath("", snapIndex, snapFileExt))), 40, -1},
	}
	snapFile := filepath.Join("snap", filepath.Base(indexedPath("", snapIndex, snapFileExt)))
	for what, d := range cases {
		t.Run(what, func(t *testing.T) {
			n := startDamaged(t, cfg, d)
			if n == nil {
				return // refused, as it must be, or as it may be
			}
			defer n.Shutdown()
			if d.file != snapFile {
				t.Fatalf("the node started on a log damaged in %s", d.file)
			}
			// A damaged snapshot may be passed over for an older one and
			// the log: then nothing committed may be missing.
			if li, _ := n.mem.LastIndex(); li < commit {
				t.Fatalf("started with entries up to %d, commit %d", li, commit)
			}
			poll(t, 5*time.Second, "the node's apply", func() bool { return n.FSM().AppliedIndex() >= commit })
			for i := range locks {
				if _, ok := lockHolder(n, fmt.Sprint("k", i), time.Now().UnixNano()); !ok {
					t.Fatalf("started without lock k%d", i)
				}
			}
		})
	}
}

// damage is a byte to flip in a raft directory.
type damage struct {
	file string // relative to the raft dir
	off  int    // the byte flipped
	at   int    // the byte a refusal names (-1: the file only)
}

// startDamaged copies cfg's raft directory, flips d's byte in the copy and
// starts a node on it. A refusal must name the file (and d.at) and leave
// it as it was; then it returns nil. Otherwise it returns the node.
func startDamaged(t *testing.T, cfg Config, d damage) *Node {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "raft")
	if err := os.CopyFS(dir, os.DirFS(cfg.RaftDir)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, d.file)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[d.off] ^= 0x5a
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.RaftDir = dir
	n, err := restart(t, cfg)
	if err == nil {
		t.Logf("started")
		return n
	}
	names := []string{path}
	if d.at >= 0 {
		names = append(names, fmt.Sprint("byte ", d.at))
	}
	t.Logf("refused: %v", err)
	wantRefusal(t, err, names...)
	if after, rerr := os.ReadFile(path); rerr != nil || !bytes.Equal(after, data) {
		t.Fatalf("refused, but %s changed (%v)", path, rerr)
	}
	return nil
}
