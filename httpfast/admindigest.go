package httpfast

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/valyala/fasthttp"
)

// stateDigester is the optional companion of an Admin that can hash its
// replicated state (replica.Node).
type stateDigester interface {
	StateDigest() (index uint64, sum [sha256.Size]byte)
}

// stateDigest is GET /v1/admin/state-digest's answer.
type stateDigest struct {
	AppliedIndex uint64 `json:"applied_index"`
	Digest       string `json:"digest"`
}

// serveDigest answers GET /v1/admin/state-digest: the SHA-256 of this
// node's replicated state and the log index it reflects (any node). Two
// nodes reporting the same index must report the same digest.
func (s *Server) serveDigest(ctx *fasthttp.RequestCtx) {
	d, ok := s.admin.(stateDigester)
	if !ok {
		writeError(ctx, errNotFound, "this node cannot digest its state")
		return
	}
	index, sum := d.StateDigest()
	s.writeValue(ctx, fasthttp.StatusOK, &stateDigest{AppliedIndex: index, Digest: hex.EncodeToString(sum[:])})
}
