package codec

import "bytes"

// MaxKeys is the most keys one ml or msl request names.
const MaxKeys = 16

// parseMulti validates an ml or msl request: line 2 is 1 to MaxKeys keys
// separated by spaces, then optionally a request id, line 3 "<timeout> [<ttl>]" (ml) or
// "<timeout> <limit> [<ttl>]" (msl).
func parseMulti(req *Request) error {
	if !splitMultiRequestID(req) {
		return ErrBadKey
	}
	var keys [MaxKeys][]byte
	n, ok := SplitKeys(req.Key, keys[:])
	if !ok {
		return ErrBadKey
	}
	for _, k := range keys[:n] {
		if bytes.IndexByte(k, '\r') >= 0 {
			return ErrBadKey
		}
	}
	var f [4][]byte
	nf := fields(req.Arg, f[:])
	if nf > len(f) {
		return ErrArgCount
	}
	if req.Cmd == CmdMultiLock {
		return parseInts(f[:nf], 1, 2, true, &req.Timeout, &req.TTL)
	}
	return parseInts(f[:nf], 2, 3, true, &req.Timeout, &req.Limit, &req.TTL)
}

// SplitKeys splits the key line of an ml or msl request into dst and
// returns how many keys it holds; ok is false when there are none, more
// than len(dst), or one is not a ValidKey. Keys are separated by single
// spaces or tabs (runs are allowed); the views alias line.
func SplitKeys(line []byte, dst [][]byte) (n int, ok bool) {
	n = fields(line, dst)
	if n == 0 || n > len(dst) {
		return n, false
	}
	for _, k := range dst[:n] {
		if !ValidKey(k) {
			return n, false
		}
	}
	return n, true
}

// SplitGrants splits the body of a granted ml or msl answer ("<token1>
// ... <tokenN> <ttl>") into dst and returns the tokens and the TTL; ok is
// false when the body does not hold exactly len(dst) tokens and a TTL.
func SplitGrants(body []byte, dst [][]byte) (ttl int64, ok bool) {
	var f [MaxKeys + 1][]byte
	n := fields(body, f[:])
	if n != len(dst)+1 || n > len(f) {
		return 0, false
	}
	v, err := parseInt(f[n-1])
	if err != nil {
		return 0, false
	}
	copy(dst, f[:n-1])
	return v, true
}

// splitMultiRequestID takes the request id off the key line of an ml or
// msl request: its last word, when that starts with "@", is "@<id>" and
// not a key, as after a single key (requestid.go); a line of one word is
// a key. It reports false when that word is "@" and no ValidRequestID.
// A key that starts with "@" can still be named, anywhere but last.
func splitMultiRequestID(req *Request) bool {
	line := req.Key
	end := len(line)
	for end > 0 && (line[end-1] == ' ' || line[end-1] == '\t') {
		end--
	}
	i := bytes.LastIndexAny(line[:end], " \t")
	if i < 0 || line[i+1] != '@' {
		return true // no id: every word is a key (or line 2 is bad)
	}
	id := line[i+2 : end]
	if !ValidRequestID(id) {
		return false
	}
	k := line[:i]
	for len(k) > 0 && (k[len(k)-1] == ' ' || k[len(k)-1] == '\t') {
		k = k[:len(k)-1]
	}
	req.Key, req.ReqID = k, id
	return true
}
