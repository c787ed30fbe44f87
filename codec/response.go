package codec

import (
	"bytes"
	"strconv"
)

// Status is the first word of a response line.
type Status uint8

// The response words of the protocol.
const (
	StatusInvalid Status = iota
	StatusOK
	StatusError
	StatusTimeout
	StatusQueued
	StatusAcquired
	StatusErrorAuth
	StatusErrorMaxLocks
	StatusErrorMaxWaiters
	StatusErrorLimitMismatch
	StatusErrorNotLeader
	// StatusErrorNotEnqueued answers a w/sw with no e/se of the
	// connection on the key left to collect (dflockd v1.10's word).
	StatusErrorNotEnqueued
	// StatusErrorAlreadyEnqueued answers an e/se on a key the connection
	// already holds or waits on.
	StatusErrorAlreadyEnqueued
	// StatusErrorLeaseExpired answers a w/sw whose enqueued grant's lease
	// ran out before the w collected it.
	StatusErrorLeaseExpired
	// StatusErrorMaxWatchers answers a watch when the server's watchers
	// are all taken; the connection stays usable.
	StatusErrorMaxWatchers
	// StatusErrorWatchOverflow ends an event stream whose reader fell too
	// far behind; StatusErrorWatchReset one whose node replaced its state
	// (a cluster follower restored a snapshot). The server closes the
	// connection after either.
	StatusErrorWatchOverflow
	StatusErrorWatchReset
	numStatus
)

var statusWords = [numStatus]string{
	StatusOK:                 "ok",
	StatusError:              "error",
	StatusTimeout:            "timeout",
	StatusQueued:             "queued",
	StatusAcquired:           "acquired",
	StatusErrorAuth:          "error_auth",
	StatusErrorMaxLocks:      "error_max_locks",
	StatusErrorMaxWaiters:    "error_max_waiters",
	StatusErrorLimitMismatch: "error_limit_mismatch",
	StatusErrorNotLeader:     "error_not_leader",

	StatusErrorNotEnqueued:     "error_not_enqueued",
	StatusErrorAlreadyEnqueued: "error_already_enqueued",
	StatusErrorLeaseExpired:    "error_lease_expired",
	StatusErrorMaxWatchers:     "error_max_watchers",
	StatusErrorWatchOverflow:   "error_watch_overflow",
	StatusErrorWatchReset:      "error_watch_reset",
}

// statusLines holds each word with its newline, built once, so AppendStatus
// is a single copy.
var statusLines = func() (t [numStatus][]byte) {
	for i, w := range statusWords {
		if w != "" {
			t[i] = []byte(w + "\n")
		}
	}
	return t
}()

// String returns the status word.
func (s Status) String() string {
	if s < numStatus {
		return statusWords[s]
	}
	return ""
}

// AppendStatus appends a line holding only the status word.
func AppendStatus(dst []byte, s Status) []byte {
	if s >= numStatus || statusLines[s] == nil {
		s = StatusError
	}
	return append(dst, statusLines[s]...)
}

// AppendGrant appends "ok <token> <ttl>" (st = StatusOK) or
// "acquired <token> <ttl>" (st = StatusAcquired).
func AppendGrant(dst []byte, st Status, token []byte, ttl int64) []byte {
	dst = append(dst, statusWords[st]...)
	dst = append(dst, ' ')
	dst = append(dst, token...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, ttl, 10)
	return append(dst, '\n')
}

// AppendRemaining appends "ok <seconds>", the answer to a renewal.
func AppendRemaining(dst []byte, seconds int64) []byte {
	dst = append(dst, "ok "...)
	dst = strconv.AppendInt(dst, seconds, 10)
	return append(dst, '\n')
}

// AppendBody appends "<word> <body>": "ok <json>" for stats,
// "error_not_leader <addr>" in cluster mode. body must hold no newline.
func AppendBody(dst []byte, st Status, body []byte) []byte {
	dst = append(dst, statusWords[st]...)
	dst = append(dst, ' ')
	dst = append(dst, body...)
	return append(dst, '\n')
}

// Response is one decoded response line. Token and Body alias the buffer
// given to DecodeResponse.
type Response struct {
	Status Status
	Token  []byte // grants: the token
	N      int64  // grants: the TTL; renewals: seconds remaining
	Body   []byte // everything after the status word, as sent
}

// DecodeResponse decodes the first response line of buf. It returns n == 0
// and a nil error when buf holds no complete line. A line whose first word
// is not a known status, or whose fields do not fit it, is ErrBadResponse
// (with n > 0: the line is consumed).
func DecodeResponse(buf []byte, resp *Response) (n int, err error) {
	i := bytes.IndexByte(buf, '\n')
	if i < 0 {
		return 0, nil
	}
	line := buf[:i]
	if i > 0 && line[i-1] == '\r' {
		line = line[:i-1]
	}
	*resp = Response{}
	word, rest, _ := bytes.Cut(line, []byte{' '})
	resp.Body = rest
	resp.Status = lookupStatus(word)
	switch resp.Status {
	case StatusInvalid:
		return i + 1, ErrBadResponse
	case StatusOK, StatusAcquired:
		var f [3][]byte
		switch fields(rest, f[:]) {
		case 0:
			if resp.Status == StatusAcquired {
				return i + 1, ErrBadResponse
			}
		case 1: // "ok <remaining>", or "ok <json>" for stats
			if resp.Status == StatusAcquired { // a grant needs token and TTL
				return i + 1, ErrBadResponse
			}
			if v, err := parseInt(f[0]); err == nil {
				resp.N = v
			}
		case 2:
			v, err := parseInt(f[1])
			if err != nil {
				if rest[0] == '{' { // stats JSON with a space inside
					return i + 1, nil
				}
				return i + 1, ErrBadResponse
			}
			resp.Token, resp.N = f[0], v
		default:
			if resp.Status == StatusOK && rest[0] != '{' {
				// "ok <token1> ... <tokenN> <ttl>": an ml or msl grant
				// (SplitGrants reads the tokens).
				if v, ok := lastInt(rest); ok {
					resp.N = v
					return i + 1, nil
				}
			}
			if resp.Status == StatusAcquired || rest[0] != '{' {
				return i + 1, ErrBadResponse
			}
		}
	}
	return i + 1, nil
}

func lookupStatus(w []byte) Status {
	for s := StatusOK; s < numStatus; s++ {
		if string(w) == statusWords[s] {
			return s
		}
	}
	return StatusInvalid
}

// lastInt parses the last space-separated field of b.
func lastInt(b []byte) (int64, bool) {
	j := bytes.LastIndexByte(b, ' ')
	v, err := parseInt(b[j+1:])
	return v, err == nil
}
