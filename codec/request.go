package codec

import (
	"bytes"
	"errors"
)

// MaxLine is the longest line a request may carry, not counting the
// newline or an optional carriage return before it.
const MaxLine = 256

// MaxSeconds bounds every timeout and TTL, and MaxLimit every semaphore
// limit, so that deadlines computed from them cannot overflow int64
// nanoseconds.
const (
	MaxSeconds = 1_000_000_000
	MaxLimit   = 1_000_000_000
)

// Decode errors. ErrLineTooLong is a framing error (returned with n == 0);
// the others are request errors (returned with n > 0, the request consumed).
var (
	ErrLineTooLong  = errors.New("codec: line too long")
	ErrUnknownCmd   = errors.New("codec: invalid command")
	ErrBadKey       = errors.New("codec: bad key")
	ErrBadArg       = errors.New("codec: bad argument")
	ErrBadInt       = errors.New("codec: bad integer")
	ErrNegative     = errors.New("codec: negative timeout")
	ErrNonPositive  = errors.New("codec: TTL or limit <= 0")
	ErrEmptyToken   = errors.New("codec: empty token")
	ErrArgCount     = errors.New("codec: wrong argument count")
	ErrBadResponse  = errors.New("codec: malformed response")
	ErrLongResponse = errors.New("codec: response line too long")
)

// Cmd is a request's command.
type Cmd uint8

// The commands of the protocol. CmdInvalid is the zero value.
const (
	CmdInvalid Cmd = iota
	CmdAuth
	CmdLock       // l
	CmdRelease    // r
	CmdRenew      // n
	CmdEnqueue    // e
	CmdWait       // w
	CmdSemLock    // sl
	CmdSemRelease // sr
	CmdSemRenew   // sn
	CmdSemEnqueue // se
	CmdSemWait    // sw
	CmdStats
	CmdWatch        // watch: turns the connection into an event stream (event.go)
	CmdSession      // session (session.go)
	CmdMultiLock    // ml: many keys at once, all or none
	CmdMultiSemLock // msl: a slot of many semaphores at once
	CmdReadLock     // rl
	CmdWriteLock    // wl
	CmdReadRelease  // rr
	CmdWriteRelease // wr
	CmdReadRenew    // rn
	CmdWriteRenew   // wn
	CmdReadEnqueue  // re
	CmdWriteEnqueue // we
	CmdReadWait     // rw
	CmdWriteWait    // ww
	CmdTagged       // tagged (tagged.go)
	CmdCancel       // cancel: tagged mode only (cancel.go)
	numCmds
)

// CmdLast is the highest valid command, for tables indexed by Cmd.
const CmdLast = numCmds - 1

var cmdNames = [numCmds]string{
	CmdInvalid:      "",
	CmdAuth:         "auth",
	CmdLock:         "l",
	CmdRelease:      "r",
	CmdRenew:        "n",
	CmdEnqueue:      "e",
	CmdWait:         "w",
	CmdSemLock:      "sl",
	CmdSemRelease:   "sr",
	CmdSemRenew:     "sn",
	CmdSemEnqueue:   "se",
	CmdSemWait:      "sw",
	CmdStats:        "stats",
	CmdWatch:        "watch",
	CmdSession:      "session",
	CmdMultiLock:    "ml",
	CmdMultiSemLock: "msl",

	CmdReadLock: "rl", CmdWriteLock: "wl", CmdReadRelease: "rr", CmdWriteRelease: "wr",
	CmdReadRenew: "rn", CmdWriteRenew: "wn", CmdReadEnqueue: "re", CmdWriteEnqueue: "we",
	CmdReadWait: "rw", CmdWriteWait: "ww",
	CmdTagged: "tagged",
	CmdCancel: "cancel",
}

// String returns the command's wire name.
func (c Cmd) String() string {
	if c < numCmds {
		return cmdNames[c]
	}
	return ""
}

// Semaphore reports whether c is one of the semaphore commands.
func (c Cmd) Semaphore() bool { return c >= CmdSemLock && c <= CmdSemWait }

// Blocking reports whether c may park the connection until a grant.
func (c Cmd) Blocking() bool {
	b := c.Base()
	return b == CmdLock || b == CmdWait || b == CmdSemLock || b == CmdSemWait ||
		c == CmdMultiLock || c == CmdMultiSemLock
}

// Multi reports whether c takes many keys at once (ml, msl).
func (c Cmd) Multi() bool { return c == CmdMultiLock || c == CmdMultiSemLock }

func lookupCmd(b []byte) Cmd {
	switch string(b) { // no allocation: the compiler compares in place
	case "l":
		return CmdLock
	case "r":
		return CmdRelease
	case "n":
		return CmdRenew
	case "e":
		return CmdEnqueue
	case "w":
		return CmdWait
	case "sl":
		return CmdSemLock
	case "sr":
		return CmdSemRelease
	case "sn":
		return CmdSemRenew
	case "se":
		return CmdSemEnqueue
	case "sw":
		return CmdSemWait
	case "stats":
		return CmdStats
	case "auth":
		return CmdAuth
	case "watch":
		return CmdWatch
	case "session":
		return CmdSession
	case "tagged":
		return CmdTagged
	case "ml":
		return CmdMultiLock
	case "msl":
		return CmdMultiSemLock
	}
	return lookupRW(b)
}

// Request is one decoded request. Key, Arg and Token alias the buffer given
// to Decode: they die when that buffer is reused.
//
// Timeout, Limit and TTL are whole seconds (Limit a count). TTL is 0 when
// the request did not give one (the server default applies).
type Request struct {
	Cmd     Cmd
	Key     []byte
	Arg     []byte
	Token   []byte // r, n, sr, sn, rr, wr, rn, wn: the token; auth: the secret
	Timeout int64  // l, w, sl, sw, rl, wl, rw, ww
	Limit   int64  // sl, se
	TTL     int64  // l, n, e, sl, sn, se, rl, wl, rn, wn, re, we; 0 = default
	// ReqID is the request id the key line may carry after the key
	// (requestid.go); nil when it carries none.
	ReqID []byte
	// LockDelayMS is the optional last field delay=<ms> of l, e, sl, se,
	// rl, wl, re and we: the request's own lock-delay in milliseconds. 0
	// means absent (the server's); delay=0 (no delay) decodes as -1.
	LockDelayMS int64
	// Prefix is set on a watch whose argument is "prefix": the key is a
	// prefix of the keys watched.
	Prefix bool
}

// Decode decodes the first request in buf into req.
//
// It returns n == 0 and a nil error when buf holds no complete request yet,
// n == 0 and ErrLineTooLong when a line exceeds MaxLine (the stream is
// lost), and n > 0 with the bytes consumed otherwise; then err is nil or
// the reason the request is invalid. A trailing "\r" on any line is
// dropped.
func Decode(buf []byte, req *Request) (n int, err error) {
	var lines [3][]byte
	off := 0
	for i := range lines {
		line, adv, err := nextLine(buf[off:])
		if err != nil || adv == 0 {
			return 0, err
		}
		lines[i] = line
		off += adv
	}
	*req = Request{Key: lines[1], Arg: lines[2]}
	return off, parse(req, lines[0])
}

// nextLine returns the first line of b without its "\n" or "\r\n", and the
// bytes it spans. adv == 0 means b holds no complete line.
func nextLine(b []byte) (line []byte, adv int, err error) {
	limit := len(b)
	if limit > MaxLine+2 {
		limit = MaxLine + 2 // room for "\r\n"
	}
	i := bytes.IndexByte(b[:limit], '\n')
	if i < 0 {
		if limit == MaxLine+2 || (limit == MaxLine+1 && b[MaxLine] != '\r') {
			return nil, 0, ErrLineTooLong
		}
		return nil, 0, nil
	}
	line = b[:i]
	if i > 0 && line[i-1] == '\r' {
		line = line[:i-1]
	}
	if len(line) > MaxLine {
		return nil, 0, ErrLineTooLong
	}
	return line, i + 1, nil
}

// parse validates req.Key and req.Arg for the command named by name.
func parse(req *Request, name []byte) error {
	req.Cmd = lookupCmd(name)
	if req.Cmd == CmdInvalid {
		return ErrUnknownCmd
	}
	if bytes.IndexByte(req.Arg, '\r') >= 0 {
		return ErrBadArg
	}
	switch req.Cmd {
	case CmdSession:
		return parseSession(req)
	case CmdTagged:
		return parseTagged(req)
	case CmdStats, CmdAuth:
		// The key is ignored, but like every line it must survive a
		// round trip, which a "\r" inside it would not.
		if bytes.IndexByte(req.Key, '\r') >= 0 {
			return ErrBadKey
		}
		if req.Cmd == CmdStats {
			return nil // the argument is ignored: any words, any number
		}
		if len(req.Arg) == 0 {
			return ErrEmptyToken
		}
		req.Token = req.Arg // the secret, spaces and all
		return nil
	}
	if req.Cmd.Multi() {
		return parseMulti(req) // the keys, then perhaps "@<id>"
	}
	if !ValidKey(req.Key) && !splitRequestID(req) {
		return ErrBadKey
	}
	if req.Cmd == CmdWatch {
		return parseWatch(req)
	}
	var f [4][]byte
	nf := fields(req.Arg, f[:])
	if nf > len(f) {
		return ErrArgCount
	}
	if nf > 0 && len(f[nf-1]) > len(delayField) && string(f[nf-1][:len(delayField)]) == delayField {
		if err := parseDelay(req, f[nf-1][len(delayField):]); err != nil {
			return err
		}
		nf--
	}
	switch req.Cmd.Base() {
	case CmdLock:
		return parseInts(f[:nf], 1, 2, true, &req.Timeout, &req.TTL)
	case CmdWait, CmdSemWait:
		return parseInts(f[:nf], 1, 1, true, &req.Timeout)
	case CmdSemLock:
		return parseInts(f[:nf], 2, 3, true, &req.Timeout, &req.Limit, &req.TTL)
	case CmdEnqueue:
		return parseInts(f[:nf], 0, 1, false, &req.TTL)
	case CmdSemEnqueue:
		return parseInts(f[:nf], 1, 2, false, &req.Limit, &req.TTL)
	case CmdRelease, CmdSemRelease:
		if nf == 0 {
			return ErrEmptyToken
		}
		if nf > 1 {
			return ErrArgCount
		}
		req.Token = f[0]
		return nil
	default: // CmdRenew, CmdSemRenew
		if nf == 0 {
			return ErrEmptyToken
		}
		req.Token = f[0]
		return parseInts(f[1:nf], 0, 1, false, &req.TTL)
	}
}

// delayField opens the optional lock-delay field of l, e, sl, se, rl, wl,
// re and we.
const delayField = "delay="

// parseDelay parses a delay=<ms> field's value into req.
func parseDelay(req *Request, b []byte) error {
	switch req.Cmd.Base() { // rl, wl, re, we too
	case CmdLock, CmdSemLock, CmdEnqueue, CmdSemEnqueue:
	default:
		return ErrBadArg
	}
	v, err := parseInt(b)
	switch {
	case err != nil:
		return err
	case v < 0:
		return ErrNegative
	case v > MaxSeconds:
		return ErrBadInt
	case v == 0:
		v = -1
	}
	req.LockDelayMS = v
	return nil
}

// parseInts parses between min and max integer fields into dst, in order.
// With timeout set, the first field is a timeout and may be 0; every other
// field is a TTL or a limit and must be > 0.
func parseInts(f [][]byte, min, max int, timeout bool, dst ...*int64) error {
	if len(f) < min || len(f) > max {
		return ErrArgCount
	}
	for i, b := range f {
		v, err := parseInt(b)
		if err != nil {
			return err
		}
		switch {
		case i == 0 && timeout && v < 0:
			return ErrNegative
		case (i > 0 || !timeout) && v <= 0:
			return ErrNonPositive
		case v > MaxSeconds:
			return ErrBadInt
		}
		*dst[i] = v
	}
	return nil
}

// parseInt parses an optionally signed base-10 integer.
func parseInt(b []byte) (int64, error) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 { // 18 digits cannot overflow int64
		return 0, ErrBadInt
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, ErrBadInt
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, nil
}

// fields splits b on runs of spaces and tabs into dst and returns how many
// it found; a count larger than len(dst) means there were too many.
func fields(b []byte, dst [][]byte) int {
	n := 0
	for i := 0; i < len(b); {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		start := i
		for i < len(b) && b[i] != ' ' && b[i] != '\t' {
			i++
		}
		if i > start {
			if n < len(dst) {
				dst[n] = b[start:i]
			}
			n++
		}
	}
	return n
}

// ValidKey reports whether k can be a key: non-empty, with no space, tab,
// carriage return or newline.
func ValidKey(k []byte) bool {
	if len(k) == 0 {
		return false
	}
	for _, c := range k {
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			return false
		}
	}
	return true
}

// AppendRequest appends the three-line wire form of a request to dst.
func AppendRequest(dst []byte, cmd Cmd, key, arg []byte) []byte {
	dst = append(dst, cmd.String()...)
	dst = append(dst, '\n')
	dst = append(dst, key...)
	dst = append(dst, '\n')
	dst = append(dst, arg...)
	return append(dst, '\n')
}
