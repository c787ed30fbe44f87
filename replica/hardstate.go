package replica

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"go.etcd.io/raft/v3/raftpb"
)

// The hard state (raft's term, vote and commit index) is the file
// <raft-dir>/hardstate, 28 bytes:
//
//	u64 term | u64 vote | u64 commit | u32 CRC-32C of the 24 bytes before
//
// all little-endian, rewritten in place at offset 0: one 28-byte write in
// one disk sector lands whole or not at all, and the CRC turns any other
// outcome into a refusal to start, never a wrong term or vote. In place,
// not renamed over: a follower rewrites its commit index after every
// entry, and a rename would put directory updates on its commit path. A
// term or vote is synced before raft acts on it (writeHardState's sync).
const hardStateSize = 28

// readHardState reads term, vote and commit (zero for a new directory).
func (st *Storage) readHardState() (*raftpb.HardState, error) {
	b := make([]byte, hardStateSize)
	n, _ := st.hs.ReadAt(b, 0)
	if n == 0 {
		return &raftpb.HardState{}, nil
	}
	if n != hardStateSize || crc32.Checksum(b[:24], walCRC) != binary.LittleEndian.Uint32(b[24:]) {
		return nil, fmt.Errorf("%w: %s is damaged at byte 0 (the hard state: term, vote and commit index): "+
			"%d bytes, or a checksum that does not match. %s", errWALCorrupt, st.hs.Name(), n, walRepair)
	}
	return &raftpb.HardState{
		Term:   new(binary.LittleEndian.Uint64(b)),
		Vote:   new(binary.LittleEndian.Uint64(b[8:])),
		Commit: new(binary.LittleEndian.Uint64(b[16:])),
	}, nil
}

// writeHardState rewrites the hard state in place. It syncs only when
// sync is set: a term or vote change must be durable before raft acts on
// it, a commit index need not (it is learnt again from the leader).
func (st *Storage) writeHardState(hs *raftpb.HardState, sync bool) error {
	var b [hardStateSize]byte
	binary.LittleEndian.PutUint64(b[:], hs.GetTerm())
	binary.LittleEndian.PutUint64(b[8:], hs.GetVote())
	binary.LittleEndian.PutUint64(b[16:], hs.GetCommit())
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[:24], walCRC))
	if _, err := st.hs.WriteAt(b[:], 0); err != nil || !sync {
		return err
	}
	return fdatasync(st.hs)
}
