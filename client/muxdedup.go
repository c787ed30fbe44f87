package client

import (
	"context"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/fence"
)

// Whether the server de-duplicates request ids. A cluster's replicated
// state does (docs/protocol.md "Request ids"): a waiting request sent
// again with its id takes over what the first attempt got. A single node
// ignores ids, though its tagged sessions keep their waits through a
// broken connection: there the request sent again would wait a second
// time, behind the first attempt, whose grant nobody would hear of. So
// a Mux with a session asks, once, when it dials (again before it would
// send a request again, if it could not tell then): a release
// carrying a new id, then a try-lock carrying the same id, on a key of
// its own. A server that de-duplicates answers the try-lock "error" (an
// id reused for another command) and applies nothing; a single node
// grants it (the Mux releases it) or answers "timeout". Where the server
// takes nothing over, the Mux sends no ids (requestID).

// dedup states.
const (
	dedupUnknown = iota
	dedupYes
	dedupNo
)

// dedupes reports whether the server de-duplicates request ids, asking it
// the first time. An error means it could not tell: ask again later.
func (m *Mux) dedupes(ctx context.Context) (bool, error) {
	m.mu.Lock()
	d := m.dedup
	m.mu.Unlock()
	if d != dedupUnknown {
		return d == dedupYes, nil
	}
	key := "latchd-dedup-probe." + m.ids.prefix
	id := m.ids.forLine(key)
	tok := fence.Token{Fence: 1, Salt: 1}.String()
	r, err := m.callHome(ctx, key, codec.CmdRelease, key, id, []byte(tok), 0)
	if err == nil && r.Status != codec.StatusErrorNotLeader {
		r, err = m.callHome(ctx, key, codec.CmdLock, key, id, []byte("0 1"), 0)
	}
	switch {
	case err != nil:
		return false, err
	case r.Status == codec.StatusErrorNotLeader:
		return false, errorFor(r, nil)
	case r.Status == codec.StatusOK && validGrant(r):
		_, _ = m.callHome(ctx, key, codec.CmdRelease, key, "", []byte(r.Token), 0)
	}
	d = dedupNo
	if r.Status == codec.StatusError {
		d = dedupYes
	}
	m.mu.Lock()
	m.dedup = d
	m.mu.Unlock()
	return d == dedupYes, nil
}
