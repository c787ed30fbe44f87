package httpfast

import (
	"bytes"
	"encoding/hex"
)

// op is what a request asks for, once its path and method are matched.
// Its name is the route label of the latency histogram: a key never is.
type op uint8

const (
	opNotFound  op = iota // no route
	opBadMethod           // a route, another method
	opHealthz
	opMetrics
	opStats
	opOpenAPI
	opSessionCreate
	opSessionDelete
	opSessionKeepalive
	opLockAcquire
	opLockRelease
	opLockRenew
	opLockEnqueue
	opLockWait
	opSemAcquire
	opSemRelease
	opSemRenew
	opSemEnqueue
	opSemWait
	opAdminCluster     // GET /v1/admin/cluster
	opAdminAddVoter    // POST /v1/admin/voters
	opAdminRemoveVoter // DELETE /v1/admin/voters/{id}
	opAdminTransfer    // POST /v1/admin/leadership-transfer
	opReadyz           // GET /readyz
	opUI               // GET /ui/...: the dashboard's static files
	opUIKeys           // GET /v1/ui/keys: the dashboard's key list
	opLockGet          // GET /v1/locks/{key}
	opSemGet           // GET /v1/semaphores/{key}
	opAdminSnapshot    // GET /v1/admin/snapshot
	opRWAcquire        // POST /v1/rwlocks/{key}?mode=read|write; the read-write family keeps the lock family's offsets
	opRWRelease
	opRWRenew
	opRWEnqueue
	opRWWait
	opRWGet       // GET /v1/rwlocks/{key}
	opWatch       // GET /v1/watch/{key}: events (SSE) or a long-poll
	opMulti       // POST /v1/multi: many keys at once
	opAdminDigest // GET /v1/admin/state-digest
	opCount
)

var opNames = [opCount]string{
	opNotFound:         "not_found",
	opBadMethod:        "method_not_allowed",
	opHealthz:          "healthz",
	opMetrics:          "metrics",
	opStats:            "stats",
	opOpenAPI:          "openapi",
	opSessionCreate:    "session_create",
	opSessionDelete:    "session_delete",
	opSessionKeepalive: "session_keepalive",
	opLockAcquire:      "lock_acquire",
	opLockRelease:      "lock_release",
	opLockRenew:        "lock_renew",
	opLockEnqueue:      "lock_enqueue",
	opLockWait:         "lock_wait",
	opSemAcquire:       "semaphore_acquire",
	opSemRelease:       "semaphore_release",
	opSemRenew:         "semaphore_renew",
	opSemEnqueue:       "semaphore_enqueue",
	opSemWait:          "semaphore_wait",
	opAdminCluster:     "admin_cluster",
	opAdminAddVoter:    "admin_add_voter",
	opAdminRemoveVoter: "admin_remove_voter",
	opAdminTransfer:    "admin_leadership_transfer",
	opReadyz:           "readyz",
	opUI:               "ui",
	opUIKeys:           "ui_keys",
	opLockGet:          "lock_get",
	opSemGet:           "semaphore_get",
	opAdminSnapshot:    "admin_snapshot",
	opRWAcquire:        "rwlock_acquire",
	opRWRelease:        "rwlock_release",
	opRWRenew:          "rwlock_renew",
	opRWEnqueue:        "rwlock_enqueue",
	opRWWait:           "rwlock_wait",
	opRWGet:            "rwlock_get",
	opWatch:            "watch",
	opMulti:            "multi_acquire",
	opAdminDigest:      "admin_state_digest",
}

// proposes reports whether o changes engine state, which in cluster mode
// only the leader serves.
func (o op) proposes() bool {
	return o >= opSessionCreate && o <= opSemWait || o >= opRWAcquire && o <= opRWWait || o == opMulti
}

// match maps a method and a raw (still percent-encoded) path to an op and
// its path parameter: the session id or the key. For a path that exists
// with other methods it returns opBadMethod and the Allow header's value.
func match(method, path []byte) (o op, param []byte, allow string) {
	m := string(method)
	switch string(path) {
	case "/healthz":
		return only(m, "GET", opHealthz, nil)
	case "/readyz":
		return only(m, "GET", opReadyz, nil)
	case "/v1/ui/keys":
		return only(m, "GET", opUIKeys, nil)
	case "/metrics":
		return only(m, "GET", opMetrics, nil)
	case "/v1/stats":
		return only(m, "GET", opStats, nil)
	case "/v1/openapi.json":
		return only(m, "GET", opOpenAPI, nil)
	case "/v1/sessions":
		return only(m, "POST", opSessionCreate, nil)
	case "/v1/multi":
		return only(m, "POST", opMulti, nil)
	}
	if rest, ok := bytes.CutPrefix(path, []byte("/v1/sessions/")); ok {
		return matchSession(m, rest)
	}
	if rest, ok := bytes.CutPrefix(path, []byte("/ui")); ok {
		if len(rest) > 0 && rest[0] != '/' {
			return opNotFound, nil, ""
		}
		return only(m, "GET", opUI, rest)
	}
	if rest, ok := bytes.CutPrefix(path, []byte("/v1/locks/")); ok {
		return matchKey(m, rest, opLockAcquire)
	}
	if rest, ok := bytes.CutPrefix(path, []byte("/v1/semaphores/")); ok {
		return matchKey(m, rest, opSemAcquire)
	}
	if rest, ok := bytes.CutPrefix(path, []byte("/v1/rwlocks/")); ok {
		return matchKey(m, rest, opRWAcquire)
	}
	if rest, ok := bytes.CutPrefix(path, []byte("/v1/watch/")); ok && len(rest) > 0 {
		return only(m, "GET", opWatch, rest)
	}
	return opNotFound, nil, ""
}

// only matches a route served for one method: o with param for that
// method, opBadMethod with the Allow header's value for any other.
func only(method, want string, o op, param []byte) (op, []byte, string) {
	if method != want {
		return opBadMethod, nil, want
	}
	return o, param, ""
}

// matchSession matches what follows /v1/sessions/: {id} or {id}/keepalive.
func matchSession(method string, rest []byte) (op, []byte, string) {
	id, sub, hasSub := bytes.Cut(rest, []byte("/"))
	switch {
	case len(id) == 0:
		return opNotFound, nil, ""
	case !hasSub:
		return only(method, "DELETE", opSessionDelete, id)
	case string(sub) == "keepalive":
		return only(method, "POST", opSessionKeepalive, id)
	}
	return opNotFound, nil, ""
}

// matchKey matches what follows /v1/locks/, /v1/semaphores/ or
// /v1/rwlocks/: {key} or {key}/renew, /enqueue, /wait. base is the
// family's acquire op; the others sit at the same offsets from it.
func matchKey(method string, rest []byte, base op) (op, []byte, string) {
	key, sub, hasSub := bytes.Cut(rest, []byte("/"))
	if len(key) == 0 {
		return opNotFound, nil, ""
	}
	if !hasSub {
		switch {
		case method == "POST":
			return base, key, ""
		case method == "DELETE":
			return base + (opLockRelease - opLockAcquire), key, ""
		case method == "GET" && base == opLockAcquire:
			return opLockGet, key, ""
		case method == "GET" && base == opRWAcquire:
			return opRWGet, key, ""
		case method == "GET":
			return opSemGet, key, ""
		}
		return opBadMethod, nil, "GET, POST, DELETE"
	}
	var o op
	switch string(sub) {
	case "renew":
		o = base + (opLockRenew - opLockAcquire)
	case "enqueue":
		o = base + (opLockEnqueue - opLockAcquire)
	case "wait":
		o = base + (opLockWait - opLockAcquire)
	default:
		return opNotFound, nil, ""
	}
	return only(method, "POST", o, key)
}

// maxKeyLen is the longest key, as on the TCP protocol's key line.
const maxKeyLen = 256

// decodeKey percent-decodes a key path segment into dst and checks it
// against the TCP key rules: non-empty, at most 256 bytes, no space, tab,
// CR or LF. It reports false for a bad key or bad percent-encoding.
func decodeKey(dst *[maxKeyLen]byte, raw []byte) ([]byte, bool) {
	n := 0
	for i := 0; i < len(raw); i++ {
		if n == maxKeyLen {
			return nil, false
		}
		c := raw[i]
		if c == '%' {
			if i+2 >= len(raw) {
				return nil, false
			}
			if _, err := hex.Decode(dst[n:n+1], raw[i+1:i+3]); err != nil {
				return nil, false
			}
			c = dst[n]
			i += 2
		}
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			return nil, false
		}
		dst[n] = c
		n++
	}
	return dst[:n], n > 0
}
