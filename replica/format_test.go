package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	"github.com/latchd/latchd/engine"
)

// startDir starts a one-node cluster on dir, as the fixture's node (v1,
// or id).
func startDir(t *testing.T, dir string, id ...string) (*Node, error) {
	t.Helper()
	cfg := testConfig(append(id, "v1")[0])
	cfg.BindAddr = "127.0.0.1:0"
	cfg.RaftDir = dir
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

// TestPreviousFormatDirUpgraded: a format-1 directory (the previous
// release's, testdata/datadir-etcd1) starts; once the node writes, FORMAT
// says 2 and its new snapshot file opens with a header; the old segment's
// records and the old snapshot are kept as they were (new records follow
// in that segment), and the node starts again with every entry.
func TestPreviousFormatDirUpgraded(t *testing.T) {
	dir := copyFixture(t, "datadir-etcd1")
	oldSeg, err := os.ReadFile(filepath.Join(dir, "wal", "00000000000000000002.wal"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := startDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t}
	l := c.leaderAmong(t, []*Node{n})
	for i := range 3 { // the fixture's own locks are k0 to k4
		req := engine.AcquireReq{Key: fmt.Appendf(nil, "new%d", i), Owner: engine.OwnerID(i + 10), Limit: 1, TTL: time.Minute}
		if out, err := l.Acquire(ctxT(t, 5*time.Second), req, nil); err != nil || out.Result != engine.Granted {
			t.Fatalf("Acquire(new%d) = %v, %v", i, out.Result, err)
		}
	}
	if err := snapshotNow(n); err != nil {
		t.Fatal(err)
	}
	applied := n.FSM().AppliedIndex()
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "FORMAT")); string(b) != "latchd etcd-raft 2\n" {
		t.Fatalf("FORMAT %q after a start and writes; want format 2", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "wal", "00000000000000000002.wal")); !bytes.HasPrefix(b, oldSeg) {
		t.Fatal("the format-1 segment's records changed")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "wal", "00000000000000000002.wal")); len(bytes.TrimRight(b, "\x00")) <= len(oldSeg) {
		t.Fatal("no records written after the format-1 segment's")
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "snap", "*.snap"))
	newest, _ := os.ReadFile(snaps[len(snaps)-1])
	if !bytes.HasPrefix(newest, []byte(snapFileMagic+"\x02")) {
		t.Fatalf("the new snapshot file opens with %q; want a format-2 header", newest[:9])
	}
	n, err = startDir(t, dir)
	if err != nil {
		t.Fatalf("restart on the mixed directory: %v", err)
	}
	defer n.Shutdown()
	c.leaderAmong(t, []*Node{n})
	if got := n.FSM().AppliedIndex(); got < applied {
		t.Fatalf("applied %d after the restart, want at least %d", got, applied)
	}
	if _, ok := lockHolder(n, "new2", time.Now().UnixNano()); !ok {
		t.Fatal("a lock granted before the restart is not held")
	}
}

// TestDataDirOfThisFormat: a directory this release wrote
// (testdata/datadir-etcd2: format 2, a snapshot at 6, entries up to 8, k0
// to k4 granted to owners 1 to 5) starts with every lock held again and the
// fence counter where it was. The next release reads it as its previous
// format.
func TestDataDirOfThisFormat(t *testing.T) {
	dir := copyFixture(t, "datadir-etcd2")
	n, err := startDir(t, dir, "v2")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown()
	(&cluster{t: t}).leaderAmong(t, []*Node{n})
	if got := n.FSM().AppliedIndex(); got < 8 {
		t.Fatalf("applied %d, want the log's 8 entries and more", got)
	}
	for i, k := range []string{"k0", "k1", "k2", "k3", "k4"} {
		l, ok := lockHolder(n, k, time.Now().UnixNano())
		if !ok || l.OwnerConnID != uint64(i+1) {
			t.Fatalf("lock %s: held %v by %d, want by %d", k, ok, l.OwnerConnID, i+1)
		}
	}
	if n.FSM().Engine().LastFence() < 1795802176970678665 {
		t.Fatalf("fence counter %d fell below the recording node's", n.FSM().Engine().LastFence())
	}
}

// TestWALMixedSegments: a log of format-1 segments (the fixture's) gets
// new segments that open with a header, and reads back whole, old and new
// segments side by side.
func TestWALMixedSegments(t *testing.T) {
	dir := filepath.Join(copyFixture(t, "datadir-etcd1"), "wal")
	w, err := OpenWAL(dir, 1) // a segment per write
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(9); i <= 12; i++ {
		if err := w.Append([]walRecord{{Index: i, Term: 3, Data: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for i := uint64(9); i <= 12; i++ {
		b, _ := os.ReadFile(indexedPath(dir, i, walExt))
		if !bytes.Equal(b[:walHeaderSize], walSegHeader(i)) {
			t.Fatalf("segment %d opens with %x; want its header", i, b[:walHeaderSize])
		}
	}
	if w, err = OpenWAL(dir, 1); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.FirstIndex() != 2 || w.LastIndex() != 12 {
		t.Fatalf("log %d-%d; want 2-12", w.FirstIndex(), w.LastIndex())
	}
	for i := uint64(2); i <= 12; i++ {
		if r, err := w.Get(i); err != nil || r.Index != i {
			t.Fatalf("Get(%d) = %+v, %v", i, r, err)
		}
	}
	// A cut back into the format-1 segment, and a write after it.
	if err := w.DeleteRange(8, 12); err != nil {
		t.Fatal(err)
	}
	if err := w.Append([]walRecord{{Index: 8, Term: 4, Data: []byte{8}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := w.Get(8); err != nil || r.Term != 4 {
		t.Fatalf("Get(8) after the cut = %+v, %v", r, err)
	}
}

// TestFailedStartLeavesPreviousFormat: a format-1 directory whose start
// is refused (a commit index past its log) keeps FORMAT 1: the mark comes
// with the first write.
func TestFailedStartLeavesPreviousFormat(t *testing.T) {
	dir := copyFixture(t, "datadir-etcd1")
	if err := os.Remove(filepath.Join(dir, "wal", "00000000000000000002.wal")); err != nil {
		t.Fatal(err)
	}
	if n, err := startDir(t, dir); err == nil {
		_ = n.Shutdown()
		t.Fatal("started with committed entries missing")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "FORMAT")); string(b) != "latchd etcd-raft 1\n" {
		t.Fatalf("FORMAT %q after a refused start; want it as it was", b)
	}
}

// wantNewer checks err is ErrNewerFormat naming what.
func wantNewer(t *testing.T, err error, what ...string) {
	t.Helper()
	if !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("err = %v; want ErrNewerFormat", err)
	}
	for _, w := range what {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q: %v", w, err)
		}
	}
}

// TestNewerFormatRefused: a directory, a segment, a log record, a
// snapshot file or a snapshot's state of a version newer than this
// release's is refused at start with ErrNewerFormat naming it, and the
// files are left as they were.
func TestNewerFormatRefused(t *testing.T) {
	t.Run("FORMAT", func(t *testing.T) {
		dir := copyFixture(t, "datadir-etcd1")
		p := filepath.Join(dir, "FORMAT")
		if err := os.WriteFile(p, []byte("latchd etcd-raft 3\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := startDir(t, dir)
		wantNewer(t, err, dir, "data format 3", "reads formats 1 and 2", "docs/upgrades.md")
		if b, _ := os.ReadFile(p); string(b) != "latchd etcd-raft 3\n" {
			t.Fatalf("FORMAT changed to %q", b)
		}
	})
	t.Run("segment", func(t *testing.T) {
		dir := copyFixture(t, "datadir-etcd1")
		p := filepath.Join(dir, "wal", "00000000000000000009.wal")
		seg := walSegHeader(9)
		seg[len(walSegMagic)] = 3
		if err := os.WriteFile(p, seg, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := startDir(t, dir)
		wantNewer(t, err, p, "log format 3")
	})
	t.Run("record", func(t *testing.T) {
		dir := copyFixture(t, "datadir-etcd1")
		p := filepath.Join(dir, "wal", "00000000000000000009.wal")
		rec := walAppend(nil, walRecord{Index: 9, Term: 2, Data: []byte{1}})
		rec[walHeaderSize] = walRecordVersion + 1
		binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:], walCRC))
		if err := os.WriteFile(p, append(walSegHeader(9), rec...), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := startDir(t, dir)
		wantNewer(t, err, "index 9", "record version 2")
	})
	t.Run("snapshot file", func(t *testing.T) {
		dir := copyFixture(t, "datadir-etcd1")
		p := filepath.Join(dir, "snap", "00000000000000000007.snap")
		body := append([]byte(snapFileMagic), 3, 1, 2, 3)
		if err := os.WriteFile(p, binary.LittleEndian.AppendUint32(body, 0), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := startDir(t, dir)
		wantNewer(t, err, p, "snapshot format 3")
	})
	t.Run("snapshot state", func(t *testing.T) {
		data := append([]byte(etcdSnapMagic[:len(etcdSnapMagic)-1]), 2, 0)
		wantNewer(t, newerSnapshot(data), "snapshot of version 2")
		if err := newerSnapshot([]byte(etcdSnapMagic + "rest")); err != nil {
			t.Fatalf("this release's own snapshot: %v", err)
		}
	})
}

// TestTransportVersions: an acceptor answers every hello with its
// version and takes a hello with no version (the previous release's) or
// its own; it refuses a dialer of a newer major version after answering
// it, and logs it. A dialer whose acceptor answers a newer major version
// closes the stream and logs it.
func TestTransportVersions(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	st := dialOnlyStorage(t)
	tr := newTransport(st, zap.New(core))
	tr.self, tr.selfAddr = 1, st.ln.Addr().String()
	got := make(chan uint64, 16)
	tr.recv = func(m *raftpb.Message) { got <- m.GetFrom() }
	tr.unreachable = func(uint64) {}
	tr.snapDone = func(uint64, bool) {}
	tr.start()
	defer tr.close()

	for _, tc := range []struct {
		from         uint64
		major, minor uint64
		accepted     bool
	}{{7, 0, 0, true}, {8, 1, 5, true}, {9, 2, 0, false}} {
		c, err := net.Dial("tcp", st.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(helloFrame(tc.from, "", tc.major, tc.minor)); err != nil {
			t.Fatal(err)
		}
		reply, err := readFrame(c, maxHello)
		if err != nil || !bytes.Equal(reply, transportReply()[4:]) {
			t.Fatalf("hello from %d: answer %q, %v; want %q", tc.from, reply, err, transportReply()[4:])
		}
		f, _ := encodeFrame(&raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(tc.from), To: proto.Uint64(1)})
		binary.LittleEndian.PutUint32(f, uint32(len(f)-4))
		_, _ = c.Write(f)
		if !tc.accepted {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a dialer of version %d.%d was not refused: %v", tc.major, tc.minor, err)
			}
			continue
		}
		select {
		case from := <-got:
			if from != tc.from {
				t.Fatalf("message from %d; want %d", from, tc.from)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the message of a dialer of version %d.%d never arrived", tc.major, tc.minor)
		}
	}
	if e := logs.FilterMessageSnippet("newer transport version").FilterField(zap.String("peer_version", "2.0")).All(); len(e) != 1 {
		t.Fatalf("%d log lines refusing the 2.0 dialer; want 1: %v", len(e), logs.All())
	}

	// The dialer's side: an acceptor answering 2.0.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			closed <- err
			return
		}
		defer c.Close()
		if _, err := readFrame(c, maxHello); err != nil {
			closed <- err
			return
		}
		r := transportReply()
		r = append(r[:4+len(transportReplyMagic)], 2, 0)
		binary.LittleEndian.PutUint32(r, uint32(len(r)-4))
		_, _ = c.Write(r)
		for { // frames until the dialer closes
			if _, err := readFrame(c, maxFrame); err != nil {
				closed <- nil
				return
			}
		}
	}()
	tr.setPeer(5, ln.Addr().String())
	tr.send(&raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(5)})
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the dialer kept a stream to an acceptor of version 2.0")
	}
	poll(t, 5*time.Second, "the dialer's log line", func() bool {
		return logs.FilterMessageSnippet("newer transport version").FilterField(zap.Uint64("peer_raft_id", 5)).Len() == 1
	})
}

// helloFrame is a hello frame from raft ID from at addr, with a version
// when major is not 0.
func helloFrame(from uint64, addr string, major, minor uint64) []byte {
	b := appendString(binary.AppendUvarint(nil, from), addr)
	if major != 0 {
		b = binary.AppendUvarint(binary.AppendUvarint(b, major), minor)
	}
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)
}
