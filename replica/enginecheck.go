package replica

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/latchd/latchd/engine"
)

// Every replica must build its engine alike (docs/cluster.md): the limits
// and the default lease decide what an entry does, so a replica with other
// settings diverges from the leader. A leader writes a fingerprint of its
// engine's settings in its Restamp (Token.Salt); a replica whose own
// differs marks itself unready, naming the leader, so the divergence shows
// before a failover makes it cost mutual exclusion.

// engineFingerprint hashes the settings of c that applying an entry reads;
// never 0.
func engineFingerprint(c engine.Config) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, v := range [...]int64{int64(c.Shards), int64(c.MaxKeys), int64(c.MaxWaiters), int64(c.MaxKeysPerOwner),
		int64(c.DefaultTTL), int64(c.GCMaxIdle)} {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		_, _ = h.Write(b[:])
	}
	return h.Sum64() | 1
}

// checkEngine records whether leader, whose Restamp carries fingerprint
// fp, built its engine as this replica did.
func (f *FSM) checkEngine(leader string, fp uint64) {
	switch {
	case fp == 0:
	case fp == f.fingerprint:
		f.unlike.Store(nil)
	default:
		f.unlike.Store(&leader)
	}
}

// engineUnlike returns the leader whose engine settings differ from this
// replica's, or "".
func (f *FSM) engineUnlike() string {
	if l := f.unlike.Load(); l != nil {
		return *l
	}
	return ""
}
