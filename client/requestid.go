package client

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"

	"github.com/latchd/latchd/codec"
)

// requestIDs makes the request ids of one client (docs/protocol.md
// "Request ids"): "<16 random hex>.<counter>", unique to the client
// without a session and within its session with one.
type requestIDs struct {
	prefix string        // random, per client: its ids' first part
	seq    atomic.Uint64 // the last id's number
}

// init draws the random prefix.
func (s *requestIDs) init() { s.prefix = strconv.FormatUint(rand.Uint64(), 16) }

// forLine returns a new id for a request whose key line is line, or ""
// when the line leaves no room for " @<id>".
func (s *requestIDs) forLine(line string) string {
	id := s.prefix + "." + strconv.FormatUint(s.seq.Add(1), 36)
	if len(line)+2+len(id) > codec.MaxLine {
		return ""
	}
	return id
}
