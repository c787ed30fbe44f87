package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Format versions. A node refuses, with ErrNewerFormat, what a newer
// release wrote (docs/upgrades.md says which releases can be mixed).
//
// The data directory (--raft-dir) has one version, in its FORMAT file:
//
//	1  the previous release: WAL segments of bare records, snapshot files
//	   of a protobuf raftpb.Snapshot and its CRC-32C
//	2  this one: each new WAL segment opens with a header (walSegMagic,
//	   version, its first index) and each new snapshot file too
//	   (snapFileMagic, version); records and snapshots within are as in 1
//
// A node reads both formats, even mixed in one directory; it marks a
// format-1 directory as format 2 (FORMAT only) before it writes into it,
// so that the previous release refuses it rather than misread it.
//
// Within the files, each log record's body opens with its version
// (walRecordVersion) and each snapshot's state with its own (etcdSnapMagic,
// then the FSM's and the engine's): those travel between nodes, in log
// entries and in snapshots sent to followers, and are unchanged, so a
// cluster can mix this release and the previous one.
//
// The transport's handshake carries the transport's version: see
// transportMajor.
const (
	dataFormat     = 2
	prevDataFormat = 1
	formatPrefix   = "latchd etcd-raft "

	walSegMagic   = "LTCHWAL" // + version byte + u64 first index: walHeaderSize bytes
	walSegVersion = 2
	snapFileMagic = "LTCHSNAP" // + version byte
	snapFileVer   = 2
)

// ErrNewerFormat means a file or a peer is of a format a newer latchd
// release wrote, which this one cannot read.
var ErrNewerFormat = errors.New("replica: written by a newer latchd release")

// formatLine is the FORMAT file's content for format v.
func formatLine(v int) string { return formatPrefix + strconv.Itoa(v) + "\n" }

// checkFormat refuses a directory of a newer format (ErrNewerFormat) or of
// the release before etcd raft (ErrOldRaftDir) and marks a new one. For a
// format-1 directory it returns the mark to make before the first write,
// so that a start that fails changes no file.
func checkFormat(dir string) (*formatMark, error) {
	b, err := os.ReadFile(filepath.Join(dir, "FORMAT"))
	if errors.Is(err, os.ErrNotExist) {
		if err := refuseOldRaftDir(dir); err != nil {
			return nil, err
		}
		if err := writeFileSync(filepath.Join(dir, "FORMAT"), []byte(formatLine(dataFormat))); err != nil {
			return nil, fmt.Errorf("replica: %w", err)
		}
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	v, ok := parseFormat(string(b))
	switch {
	case !ok:
		return nil, fmt.Errorf("replica: raft dir %s has an unknown FORMAT %q", dir, b)
	case v > dataFormat:
		return nil, fmt.Errorf("%w: raft dir %s is of data format %d; this release reads formats %d and %d. "+
			"The directory is left as it is: run a release that reads it, or replace this node "+
			"(docs/upgrades.md)", ErrNewerFormat, dir, v, prevDataFormat, dataFormat)
	case v < dataFormat:
		return &formatMark{dir: dir}, nil
	}
	return nil, nil
}

// formatMark moves a format-1 directory to format 2, once, before the
// first write into it.
type formatMark struct {
	once sync.Once
	dir  string
	err  error
}

// mark rewrites FORMAT, the first time; a failure sticks (the write that
// needed the mark fails, and the next ones).
func (m *formatMark) mark() error {
	if m == nil {
		return nil
	}
	m.once.Do(func() {
		if err := writeFileSync(filepath.Join(m.dir, "FORMAT"), []byte(formatLine(dataFormat))); err != nil {
			m.err = fmt.Errorf("replica: mark raft dir %s as format %d: %w", m.dir, dataFormat, err)
		}
	})
	return m.err
}

// parseFormat reads a FORMAT file's version, from prevDataFormat on.
func parseFormat(s string) (int, bool) {
	rest, ok := strings.CutPrefix(s, formatPrefix)
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, "\n")
	v, err := strconv.Atoi(rest)
	return v, ok && err == nil && v >= prevDataFormat && strconv.Itoa(v) == rest
}

// refuseOldRaftDir refuses a directory without FORMAT that holds the files
// of the release before etcd raft.
func refuseOldRaftDir(dir string) error {
	for _, name := range []string{"raft.db", "snapshots", "wal"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return fmt.Errorf("%w (found %s in %s). The directory is left as it is. "+
				"If the other nodes run this release: remove this node from the cluster (DELETE /v1/admin/voters/{id} "+
				"on the leader), move %s aside or empty it, start the node and add it back (POST /v1/admin/voters); "+
				"it catches up from the leader's snapshot. If no node does: start a new cluster on empty directories "+
				"(docs/upgrades.md)", ErrOldRaftDir, name, dir, dir)
		}
	}
	return nil
}

// walSegHeader is the header a new segment whose first record is first
// opens with.
func walSegHeader(first uint64) []byte {
	b := make([]byte, 0, walHeaderSize)
	b = append(b, walSegMagic...)
	b = append(b, walSegVersion)
	return binary.LittleEndian.AppendUint64(b, first)
}

// readSegHeader returns where the records of the segment file data (named
// for first) begin: after its header, or at 0 for a segment of format 1,
// which has none. A header's magic is never the start of a record (read
// as a record's length, it is above walMaxRecord).
func readSegHeader(data []byte, first uint64, name string) (int64, error) {
	if len(data) < len(walSegMagic) || !bytes.Equal(data[:len(walSegMagic)], []byte(walSegMagic)) {
		return 0, nil
	}
	if len(data) < walHeaderSize {
		return 0, fmt.Errorf("%w: %s: a segment header cut short. %s", errWALCorrupt, name, walRepair)
	}
	if v := data[len(walSegMagic)]; v > walSegVersion {
		return 0, fmt.Errorf("%w: log segment %s is of log format %d; this release reads up to %d",
			ErrNewerFormat, name, v, walSegVersion)
	} else if v < walSegVersion {
		return 0, fmt.Errorf("%w: %s: a segment header of version %d. %s", errWALCorrupt, name, v, walRepair)
	}
	if got := binary.LittleEndian.Uint64(data[len(walSegMagic)+1:]); got != first {
		return 0, fmt.Errorf("%w: %s: its header names first entry %d. %s", errWALCorrupt, name, got, walRepair)
	}
	return walHeaderSize, nil
}

// snapFileHeader opens every snapshot file this release writes.
func snapFileHeader() []byte { return append([]byte(snapFileMagic), snapFileVer) }

// cutSnapFileHeader returns body, a snapshot file without its CRC, without
// its header; a format-1 file, which has none, as it is. A header is never
// the start of a format-1 file's protobuf (0x4c is no field a Snapshot
// can open with).
func cutSnapFileHeader(body []byte, name string) ([]byte, error) {
	rest, ok := bytes.CutPrefix(body, []byte(snapFileMagic))
	if !ok {
		return body, nil
	}
	if len(rest) == 0 || rest[0] < snapFileVer {
		return nil, fmt.Errorf("%w: snapshot file %s: bad header", ErrBadSnapshot, name)
	}
	if rest[0] > snapFileVer {
		return nil, fmt.Errorf("%w: snapshot file %s is of snapshot format %d; this release reads up to %d",
			ErrNewerFormat, name, rest[0], snapFileVer)
	}
	return rest[1:], nil
}

// newerSnapshot refuses a snapshot's state of a version above
// etcdSnapMagic's (a newer leader's, or a newer release's file).
func newerSnapshot(data []byte) error {
	n := len(etcdSnapMagic) - 1
	if len(data) > n && string(data[:n]) == etcdSnapMagic[:n] && data[n] > etcdSnapMagic[n] {
		return fmt.Errorf("%w: a snapshot of version %d; this release reads %d", ErrNewerFormat, data[n], etcdSnapMagic[n])
	}
	return nil
}
