package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
	"go.uber.org/zap"
)

// The tests here damage a stopped node's raft log the way a disk can, and
// check that a node either starts with every committed entry or refuses to
// start, naming the damage and leaving the files as they are.

// grantLocks has n grant count locks, each one an entry of the log.
func grantLocks(t *testing.T, n *Node, count int) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	for i := range count {
		req := engine.AcquireReq{Key: fmt.Appendf(nil, "k%d", i), Owner: engine.OwnerID(i + 1), Limit: 1, TTL: time.Minute}
		if out, err := n.Acquire(ctx, req, nil); err != nil || out.Result != engine.Granted {
			t.Fatalf("Acquire(k%d) = %v, %v", i, out.Result, err)
		}
	}
}

// stoppedNode runs a one-node cluster, has it grant count locks, stops it
// and returns its config (to start it again) and the commit index its
// hard state holds.
func stoppedNode(t *testing.T, count int) (Config, uint64) {
	t.Helper()
	c := newCluster(t, 1, nil)
	grantLocks(t, c.leader(t), count)
	cfg := c.nodes[0].cfg
	c.kill(t, 0)
	return cfg, diskCommit(t, cfg.RaftDir)
}

func diskCommit(t *testing.T, dir string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "hardstate"))
	if err != nil || len(b) != hardStateSize {
		t.Fatalf("hardstate: %d bytes, %v", len(b), err)
	}
	return binary.LittleEndian.Uint64(b[16:])
}

// newestSegment is the path of the newest segment in dir's log, and its
// bytes.
func newestSegment(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "wal", "*"+walExt))
	if err != nil || len(names) == 0 {
		t.Fatalf("segments %v, %v", names, err)
	}
	name := names[len(names)-1] // %020d: names sort by index
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return name, data
}

// recordOffsets are the offsets of the intact records at the front of a
// segment whose first record is first (after its header), and the end of
// the last one.
func recordOffsets(data []byte, first uint64) (offs []int, end int) {
	if h, err := readSegHeader(data, first, "segment"); err == nil {
		end = int(h)
	}
	for i := first; ; i++ {
		n, ok := walCheck(data[end:], i)
		if !ok {
			return offs, end
		}
		offs = append(offs, end)
		end += n
	}
}

// recordAt is the offset of the record that holds byte off.
func recordAt(offs []int, off int) int {
	at := 0
	for _, o := range offs {
		if o <= off {
			at = o
		}
	}
	return at
}

func segmentFirst(t *testing.T, name string) uint64 {
	t.Helper()
	var first uint64
	if _, err := fmt.Sscanf(filepath.Base(name), "%d.wal", &first); err != nil {
		t.Fatal(err)
	}
	return first
}

// restart starts the stopped node in cfg.RaftDir again, on a new port.
func restart(t *testing.T, cfg Config) (*Node, error) {
	t.Helper()
	cfg.BindAddr = "127.0.0.1:0"
	st, err := DiskStorage(cfg, zap.NewNop())
	if err != nil {
		return nil, err
	}
	n, err := New(cfg, zap.NewNop(), st)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return n, nil
}

// wantRefusal checks that err refuses a damaged log and tells the
// operator what to do, naming what is given.
func wantRefusal(t *testing.T, err error, names ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("the node started on a damaged log")
	}
	for _, want := range append(names, "left as", "lost its disk", "remove it from the cluster", "add it back") {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// A write that never finished (half of a new record, then the
// preallocated zeros) is cut at the next start, and the node starts with
// every entry before it.
func TestTornTailIsCut(t *testing.T) {
	cfg, commit := stoppedNode(t, 5)
	name, data := newestSegment(t, cfg.RaftDir)
	offs, end := recordOffsets(data, segmentFirst(t, name))
	last := segmentFirst(t, name) + uint64(len(offs)) - 1
	// A record of several disk sectors, of which only the first reached
	// the disk: the rest reads as zeros.
	torn := walAppend(nil, walRecord{Index: last + 1, Term: 1, Data: bytes.Repeat([]byte{7}, 3000)})
	copy(data[end:], torn[:len(torn)/4])
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := restart(t, cfg)
	if err != nil {
		t.Fatalf("a torn tail refused the start: %v", err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	if li, _ := n.mem.LastIndex(); li != last || li < commit {
		t.Fatalf("started with entries up to %d, want %d (commit %d)", li, last, commit)
	}
	if n.st.wal.Cut() == 0 {
		t.Error("Cut() = 0 after cutting a torn write")
	}
	if _, err := n.st.wal.Get(last); err != nil {
		t.Fatalf("the last whole entry: %v", err)
	}
}

// A flipped byte in the middle of the newest segment (here a follower's
// only one) is damage, not an unfinished write: intact, committed entries
// follow it. The node refuses to start, names the file and the offset, and
// leaves the file as it was.
func TestDamageInNewestSegmentRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	grantLocks(t, l, 20)
	f := (c.index(l) + 1) % 3
	poll(t, 5*time.Second, "the follower's apply", func() bool {
		return c.nodes[f].FSM().AppliedIndex() >= l.FSM().AppliedIndex()
	})
	cfg := c.nodes[f].cfg
	c.kill(t, f)
	name, data := newestSegment(t, cfg.RaftDir)
	offs, end := recordOffsets(data, segmentFirst(t, name))
	if end < 400 {
		t.Fatalf("only %d bytes of records", end)
	}
	data[200] ^= 0xff
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := restart(t, cfg)
	if err == nil {
		_ = n.Shutdown()
	}
	wantRefusal(t, err, name, fmt.Sprint("byte ", recordAt(offs, 200)))
	after, rerr := os.ReadFile(name)
	if rerr != nil || !bytes.Equal(after, data) {
		t.Fatalf("the damaged segment changed: %v", rerr)
	}
}

// Damage in a segment older than the newest is always refused.
func TestDamageInOlderSegmentRefused(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenWAL(dir, 512)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 60; i += 10 {
		if err := w.Append(walLogs(i, i+9, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*"+walExt))
	if err != nil || len(names) < 3 {
		t.Fatalf("segments %v, %v", names, err)
	}
	for _, name := range names[:len(names)-1] {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		offs, end := recordOffsets(data, segmentFirst(t, name))
		off := end - 3 // inside its last record: nothing of that segment follows
		data[off] ^= 0xff
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = OpenWAL(dir, 512)
		if !errors.Is(err, errWALCorrupt) {
			t.Fatalf("%s damaged: %v", name, err)
		}
		wantRefusal(t, err, name, fmt.Sprint("byte ", recordAt(offs, off)))
		data[off] ^= 0xff
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A hard state whose commit index is past the last entry the log and the
// snapshot hold means committed entries are missing: the node refuses to
// start rather than let raft panic or serve without them.
func TestCommitPastLogRefused(t *testing.T) {
	cfg, commit := stoppedNode(t, 3)
	st := Storage{dir: cfg.RaftDir}
	f, err := os.OpenFile(filepath.Join(cfg.RaftDir, "hardstate"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st.hs = f
	hs, err := st.readHardState()
	if err == nil {
		hs.Commit = new(commit + 5)
		err = st.writeHardState(hs, true)
	}
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	n, err := restart(t, cfg)
	if err == nil {
		_ = n.Shutdown()
	}
	wantRefusal(t, err, "committed entries are missing", fmt.Sprint(commit+5))
}

// Flipping any one byte of the records in the newest segment never gives
// a started node that lacks a committed entry: it either refuses to start
// or has them all.
func TestFlippedByteNeverLosesCommitted(t *testing.T) {
	cfg, commit := stoppedNode(t, 12)
	orig := cfg.RaftDir
	name, data := newestSegment(t, orig)
	first := segmentFirst(t, name)
	offs, end := recordOffsets(data, first)
	if len(offs) < 4 {
		t.Fatalf("only %d records", len(offs))
	}
	// Every byte of the first two records and of the last two, and every
	// seventh between: bounded, and it covers headers and bodies.
	var at []int
	for off := 0; off < end; off++ {
		if off < offs[2] || off >= offs[len(offs)-2] || off%7 == 0 {
			at = append(at, off)
		}
	}
	for _, off := range at {
		dir := filepath.Join(t.TempDir(), "raft")
		if err := os.CopyFS(dir, os.DirFS(orig)); err != nil {
			t.Fatal(err)
		}
		seg := filepath.Join(dir, "wal", filepath.Base(name))
		bad := bytes.Clone(data)
		bad[off] ^= 0xff
		if err := os.WriteFile(seg, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.RaftDir = dir
		n, err := restart(t, cfg)
		if err != nil { // refused: nothing lost, and nothing changed
			if after, rerr := os.ReadFile(seg); rerr != nil || !bytes.Equal(after, bad) {
				t.Fatalf("byte %d flipped: refused (%v), but the segment changed (%v)", off, err, rerr)
			}
			continue
		}
		li, _ := n.mem.LastIndex()
		_ = n.Shutdown()
		if li < commit {
			t.Fatalf("byte %d flipped: the node started with entries up to %d, commit %d", off, li, commit)
		}
	}
}
