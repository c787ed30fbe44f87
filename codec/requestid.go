package codec

import "bytes"

// MaxRequestID is the longest request id a key line may carry.
const MaxRequestID = 64

// A request id rides on the key line, after the key, one space and an
// "@": "k1 @7f3a09c2". A key holds no space, so a dflockd client never
// sends one (its key line would be a protocol violation), and a request
// without an id decodes exactly as before: the key line is only searched
// for an id once it failed to be a key.

// splitRequestID splits req.Key into the key and the request id after it,
// and reports whether the key line has that form: a valid key, a space,
// "@", then 1 to MaxRequestID bytes from '!' to '~'.
func splitRequestID(req *Request) bool {
	i := bytes.IndexByte(req.Key, ' ')
	if i <= 0 || i+2 >= len(req.Key) || req.Key[i+1] != '@' {
		return false
	}
	key, id := req.Key[:i], req.Key[i+2:]
	if !ValidRequestID(id) || !ValidKey(key) {
		return false
	}
	req.Key, req.ReqID = key, id
	return true
}

// ValidRequestID reports whether id can be a request id: 1 to
// MaxRequestID printable ASCII bytes, no space.
func ValidRequestID(id []byte) bool {
	if len(id) == 0 || len(id) > MaxRequestID {
		return false
	}
	for _, c := range id {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// AppendRequestID appends the three-line wire form of a request whose key
// line carries the request id id (none when id is empty) to dst.
func AppendRequestID(dst []byte, cmd Cmd, key, id, arg []byte) []byte {
	dst = append(dst, cmd.String()...)
	dst = append(dst, '\n')
	dst = append(dst, key...)
	if len(id) > 0 {
		dst = append(dst, " @"...)
		dst = append(dst, id...)
	}
	dst = append(dst, '\n')
	dst = append(dst, arg...)
	return append(dst, '\n')
}
