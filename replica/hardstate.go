package replica

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"go.etcd.io/raft/v3/raftpb"
)

// readHardState reads term, vote and commit (zero for a new directory).
func (st *Storage) readHardState() (*raftpb.HardState, error) {
	b := make([]byte, hardStateSize)
	n, _ := st.hs.ReadAt(b, 0)
	if n == 0 {
		return &raftpb.HardState{}, nil
	}
	if n != hardStateSize || crc32.Checksum(b[:24], walCRC) != binary.LittleEndian.Uint32(b[24:]) {
		return nil, fmt.Errorf("%w: hardstate damaged", errWALCorrupt)
	}
	return &raftpb.HardState{
		Term:   new(binary.LittleEndian.Uint64(b)),
		Vote:   new(binary.LittleEndian.Uint64(b[8:])),
		Commit: new(binary.LittleEndian.Uint64(b[16:])),
	}, nil
}

// writeHardState rewrites the hard state in place (28 bytes, one sector:
// a torn write is not expected; the CRC would catch it). It syncs only
// when sync is set: a term or vote change must be durable before raft
// acts on it, a commit index need not (it is learnt again from the leader).
func (st *Storage) writeHardState(hs *raftpb.HardState, sync bool) error {
	var b [hardStateSize]byte
	binary.LittleEndian.PutUint64(b[:], hs.GetTerm())
	binary.LittleEndian.PutUint64(b[8:], hs.GetVote())
	binary.LittleEndian.PutUint64(b[16:], hs.GetCommit())
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[:24], walCRC))
	if sync {
		if _, err := st.hs.WriteAt(b[:], 0); err != nil {
			return err
		}
		return fdatasync(st.hs)
	}
	_, err := st.hs.WriteAt(b[:], 0)
	return err
}
