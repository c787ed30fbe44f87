package httpfast

import (
	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
)

// idempotencyHeader names the request id of a lock or semaphore request
// (docs/http.md "Retries"). A cluster applies a request with a given id
// once per session: a retry gets the first one's answer, and a retried
// acquire or wait whose first attempt parked on a leader that died takes
// its place in the queue back.
const idempotencyHeader = "Idempotency-Key"

// maxIdempotencyKey is the longest Idempotency-Key accepted, as the TCP
// protocol's request ids.
const maxIdempotencyKey = 64

// validIdempotencyKey reports whether k is 1 to maxIdempotencyKey
// printable ASCII bytes without space.
func validIdempotencyKey(k []byte) bool {
	if len(k) == 0 || len(k) > maxIdempotencyKey {
		return false
	}
	for _, c := range k {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// scopedRequestID returns the request id the backend de-duplicates by:
// the header's key scoped to the session (backend.ScopeReqID: its owner
// ID, top bit set, then the key), so that one session cannot replay
// another's answers. nil without a key.
func scopedRequestID(owner engine.OwnerID, key []byte) []byte {
	return backend.ScopeReqID(make([]byte, 0, 8+len(key)), owner, key)
}
