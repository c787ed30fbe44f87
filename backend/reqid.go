package backend

import (
	"encoding/binary"

	"github.com/latchd/latchd/engine"
)

// Request ids are scoped to the session that sends them: the replicated
// state de-duplicates by ScopeReqID(session, id), so that one client's id
// never meets another's. A REST session's scoped id is its owner ID (8
// bytes, big-endian; bit 63 set) then the id; a TCP session's (bit 63
// clear) is a 0 byte, its owner ID, then the id. Both start with a byte
// no client id holds (ids are printable ASCII), so they never equal an
// unscoped id, the one a connection without a session sends: it has no
// identity that outlives it, and its retry comes from a new connection.

// ScopeReqID appends to dst the request id id scoped to the session
// scope (0: none, id as it is), and returns it; nil when id is empty.
func ScopeReqID(dst []byte, scope engine.OwnerID, id []byte) []byte {
	if len(id) == 0 {
		return nil
	}
	if scope != 0 && scope&SessionBit == 0 {
		dst = append(dst, 0)
	}
	if scope != 0 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(scope))
	}
	return append(dst, id...)
}
