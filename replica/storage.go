package replica

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/latchd/latchd/internal/listen"
)

// The on-disk layout of --raft-dir:
//
//	FORMAT      "latchd etcd-raft 2": the data format (format.go), checked at start
//	LOCK        flock'ed while a process uses the directory
//	wal/        the raft log (WAL), one record per entry (a raftpb.Entry)
//	hardstate   term, vote, commit and a CRC-32C, rewritten in place
//	snap/       snapshots, %020d.snap by index, newest SnapshotRetain kept
//
// A directory of a release from before etcd raft (no FORMAT) is refused
// with ErrOldRaftDir, unread and unchanged.
const (
	snapFileExt = ".snap"
	dialTimeout = 2 * time.Second
)

// ErrOldRaftDir means --raft-dir holds the data of a latchd release from
// before etcd raft, which this one cannot read.
var ErrOldRaftDir = errors.New("replica: raft dir was written by a latchd release from before etcd raft; this release cannot read it")

// Storage is what a Node keeps its state in and talks through:
// the raft directory and the transport's listener. DiskStorage opens it.
type Storage struct {
	dir  string
	wal  *WAL
	hs   *os.File
	lock *os.File
	ln   net.Listener // a listen.Guard: Accept fails only once closed
	key  []byte       // the raft auth token (auth.go), or nil
	// format, when set, moves a directory of the previous format to this
	// one before the first write (format.go).
	format *formatMark
	// Close, if set, runs after the node has stopped (closes files, sockets).
	Close func() error
	// passedOver are the damaged snapshot files loadSnapshot skipped.
	passedOver []string
}

// DiskStorage opens (or creates) cfg.RaftDir and listens on cfg.BindAddr,
// with the HMAC handshake of auth.go when cfg.AuthToken is set.
func DiskStorage(cfg Config, log *zap.Logger) (Storage, error) {
	if cfg.RaftDir == "" || cfg.BindAddr == "" {
		return Storage{}, errors.New("replica: an on-disk node needs a raft dir and a bind address")
	}
	log = cmp.Or(log, zap.NewNop())
	if err := os.MkdirAll(cfg.RaftDir, 0o700); err != nil {
		return Storage{}, fmt.Errorf("replica: %w", err)
	}
	st := Storage{dir: cfg.RaftDir}
	fail := func(err error) (Storage, error) {
		st.closeFiles()
		return Storage{}, err
	}
	lock, err := os.OpenFile(filepath.Join(cfg.RaftDir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fail(fmt.Errorf("replica: %w", err))
	}
	st.lock = lock
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail(fmt.Errorf("replica: raft dir %s is in use by another process: %w", cfg.RaftDir, err))
	}
	if st.format, err = checkFormat(cfg.RaftDir); err != nil {
		return fail(err)
	}
	if st.wal, err = OpenWAL(filepath.Join(cfg.RaftDir, "wal"), 0); err != nil {
		return fail(err)
	}
	if cut := st.wal.Cut(); cut > 0 {
		log.Warn("raft log: an unfinished write at the tail is cut off before the next write", zap.Int64("bytes", cut))
	}
	if st.hs, err = os.OpenFile(filepath.Join(cfg.RaftDir, "hardstate"), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return fail(fmt.Errorf("replica: %w", err))
	}
	if err := os.MkdirAll(filepath.Join(cfg.RaftDir, "snap"), 0o700); err != nil {
		return fail(fmt.Errorf("replica: %w", err))
	}
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return fail(fmt.Errorf("replica: transport: %w", err))
	}
	if cfg.AuthToken != "" {
		if err := advertisable(ln, cfg.AdvertiseAddr); err != nil {
			_ = ln.Close() // the address error is the one to report
			return fail(err)
		}
		st.key = []byte(cfg.AuthToken)
	}
	// Guarded: an accept error (EMFILE) is logged, backed off and retried.
	st.ln = listen.NewSet(log, nil).Wrap("raft", ln)
	st.Close = func() error {
		err := st.ln.Close() // nil when the node's transport closed it first
		st.closeFiles()
		return err
	}
	return st, nil
}

func (st *Storage) closeFiles() {
	if st.wal != nil {
		_ = st.wal.Close()
	}
	if st.hs != nil {
		_ = st.hs.Close()
	}
	if st.lock != nil {
		_ = st.lock.Close() // drops the flock
	}
}

// writeFileSync writes a file whole and durably: a temporary file, fsync,
// rename, fsync of the directory.
func writeFileSync(path string, parts ...[]byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	for _, b := range parts {
		if _, err = f.Write(b); err != nil {
			break
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if err := errors.Join(err, f.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// saveSnapshot writes snap durably, from the state's own bytes
// (snapshotParts), and keeps the newest retain files.
func (st *Storage) saveSnapshot(snap *raftpb.Snapshot, retain int) error {
	if err := st.format.mark(); err != nil {
		return err
	}
	parts, err := snapshotParts(snap)
	if err != nil {
		return err
	}
	parts = append([][]byte{snapFileHeader()}, parts...)
	var crc uint32
	for _, p := range parts {
		crc = crc32.Update(crc, walCRC, p)
	}
	parts = append(parts, binary.LittleEndian.AppendUint32(nil, crc))
	dir := filepath.Join(st.dir, "snap")
	if err := writeFileSync(indexedPath(dir, snap.GetMetadata().GetIndex(), snapFileExt), parts...); err != nil {
		return err
	}
	idx, _ := indexedFiles(dir, snapFileExt)
	for len(idx) > max(retain, 1) {
		_ = os.Remove(indexedPath(dir, idx[0], snapFileExt))
		idx = idx[1:]
	}
	return nil
}

// snapshotParts is snap's protobuf encoding (what proto.Marshal gives) in
// pieces: the state's field header, the state itself (snap.Data, not a
// copy: a long memmove would hold up a collection's stop-the-world) and
// the metadata.
func snapshotParts(snap *raftpb.Snapshot) ([][]byte, error) {
	data := snap.GetData()
	if len(data) == 0 {
		b, err := proto.Marshal(snap)
		return [][]byte{b}, err
	}
	// Field 1 (data) first, then field 2 (metadata), as proto.Marshal
	// orders them.
	rest := &raftpb.Snapshot{Metadata: snap.GetMetadata()}
	rest.ProtoReflect().SetUnknown(snap.ProtoReflect().GetUnknown()) // proto.Marshal writes them last
	meta, err := proto.Marshal(rest)
	if err != nil {
		return nil, err
	}
	head := binary.AppendUvarint([]byte{1<<3 | 2}, uint64(len(data)))
	return [][]byte{head, data, meta}, nil
}

// indexedPath is dir/<index, 20 digits><ext>: how the log's segments and
// the snapshots are named.
func indexedPath(dir string, index uint64, ext string) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", index, ext))
}

// indexedFiles lists the indexes of dir's files named as indexedPath
// names them, in order.
func indexedFiles(dir, ext string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	var idx []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ext)
		if !ok || e.IsDir() {
			continue
		}
		if i, err := strconv.ParseUint(name, 10, 64); err == nil {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	return idx, nil
}

// loadSnapshot returns the newest intact snapshot, or nil.
func (st *Storage) loadSnapshot() (*raftpb.Snapshot, error) {
	idx, _ := indexedFiles(filepath.Join(st.dir, "snap"), snapFileExt)
	for i := len(idx) - 1; i >= 0; i-- {
		path := indexedPath(filepath.Join(st.dir, "snap"), idx[i], snapFileExt)
		b, err := os.ReadFile(path)
		if err != nil || len(b) < 4 {
			st.passedOver = append(st.passedOver, path)
			continue
		}
		// A newer release's file is refused before its checksum, which
		// that release may compute otherwise, is read.
		body, err := cutSnapFileHeader(b[:len(b)-4], path)
		if errors.Is(err, ErrNewerFormat) {
			return nil, err
		}
		snap := &raftpb.Snapshot{}
		if err != nil || crc32.Checksum(b[:len(b)-4], walCRC) != binary.LittleEndian.Uint32(b[len(b)-4:]) ||
			proto.Unmarshal(body, snap) != nil {
			st.passedOver = append(st.passedOver, path)
			continue
		}
		return snap, nil
	}
	return nil, nil
}

// appendEntries writes ents to the WAL with one fdatasync, first cutting a
// conflicting tail.
func (st *Storage) appendEntries(ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	if err := st.format.mark(); err != nil {
		return err
	}
	// A conflicting tail goes first: from ents' first index on (all of
	// the log when that is at or below its first entry).
	if err := st.wal.DeleteRange(max(ents[0].GetIndex(), st.wal.FirstIndex()), st.wal.LastIndex()); err != nil {
		return err
	}
	recs := make([]walRecord, len(ents))
	for i, e := range ents {
		b, err := proto.Marshal(e)
		if err != nil {
			return err
		}
		recs[i] = walRecord{Index: e.GetIndex(), Term: e.GetTerm(), Data: b}
	}
	return st.wal.Append(recs)
}

// readEntries reads the WAL's entries above after.
func (st *Storage) readEntries(after uint64) ([]*raftpb.Entry, error) {
	first, last := st.wal.FirstIndex(), st.wal.LastIndex()
	if first == 0 {
		return nil, nil
	}
	var ents []*raftpb.Entry
	for i := max(first, after+1); i <= last; i++ {
		r, err := st.wal.Get(i)
		if err != nil {
			return nil, err
		}
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(r.Data, e); err != nil {
			return nil, fmt.Errorf("%w: entry %d: %w", errWALCorrupt, i, err)
		}
		ents = append(ents, e)
	}
	return ents, nil
}
