package codec

import (
	"bytes"
	"errors"
)

// Tagged mode. A connection asks for it with the greeting request
//
//	tagged\n1\n\n      answered "ok"
//
// which dflockd clients never send. From the next request on, every
// request's command line starts with a tag and may name a session:
//
//	#<tag> <cmd>[ <session-id>]\n<key>[ @<request-id>]\n<arg>\n
//
// and every answer is its request's answer line with the tag before it:
//
//	#<tag> <answer>\n
//
// The key and argument lines are those of the plain protocol. Answers
// come in the order they are ready, not the order of the requests: a
// waiting acquire holds back nothing behind it.

// TaggedVersion is the key line of the greeting: the version of tagged
// mode the client speaks.
const TaggedVersion = "1"

// MaxTag is the longest tag; MaxSessionField the longest session field.
const (
	MaxTag          = 16
	MaxSessionField = 64
)

// ErrBadTag means a tagged request's command line does not start with
// "#<tag> ": its answer cannot be addressed (the tag is unknown).
var ErrBadTag = errors.New("codec: bad tag")

// Tagged is one decoded tagged request. Tag and Session alias the buffer
// given to DecodeTagged, like the Request's views.
type Tagged struct {
	Tag     []byte // 1 to MaxTag bytes from '!' to '~'
	Session []byte // the session the request acts for; nil: the connection
	Request
}

// DecodeTagged decodes the first tagged request in buf into t, with
// Decode's contract for n and err. t.Tag is set whenever the command line
// was complete and began with a valid tag, even when err is not nil (the
// answer to an invalid request can then name it); it is nil on ErrBadTag.
func DecodeTagged(buf []byte, t *Tagged) (n int, err error) {
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
	*t = Tagged{Request: Request{Key: lines[1], Arg: lines[2]}}
	cmd, ok := splitTag(t, lines[0])
	if !ok {
		return off, ErrBadTag
	}
	if string(cmd) == cancelName {
		return off, parseCancel(&t.Request)
	}
	return off, parse(&t.Request, cmd)
}

// splitTag sets t.Tag and t.Session from the command line and returns the
// command word.
func splitTag(t *Tagged, line []byte) ([]byte, bool) {
	if len(line) < 2 || line[0] != '#' {
		return nil, false
	}
	i := bytes.IndexByte(line, ' ')
	if i < 0 || !validTag(line[1:i]) {
		return nil, false
	}
	t.Tag = line[1:i]
	rest := line[i+1:]
	j := bytes.IndexByte(rest, ' ')
	if j < 0 {
		return rest, true
	}
	sess := rest[j+1:]
	if len(sess) == 0 || len(sess) > MaxSessionField || !printable(sess) {
		return nil, true // parse finds no command: ErrUnknownCmd
	}
	t.Session = sess
	return rest[:j], true
}

// validTag reports whether b can be a tag.
func validTag(b []byte) bool { return len(b) > 0 && len(b) <= MaxTag && printable(b) }

// printable reports whether every byte of b is from '!' to '~'.
func printable(b []byte) bool {
	for _, c := range b {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// AppendTag appends the tag prefix of an answer, "#<tag> ", to dst; the
// answer line follows it.
func AppendTag(dst, tag []byte) []byte {
	dst = append(dst, '#')
	dst = append(dst, tag...)
	return append(dst, ' ')
}

// AppendTagged appends the wire form of a tagged request to dst: session
// and id may be empty.
func AppendTagged(dst, tag []byte, cmd Cmd, session, key, id, arg []byte) []byte {
	dst = AppendTag(dst, tag)
	dst = append(dst, cmd.String()...)
	if len(session) > 0 {
		dst = append(dst, ' ')
		dst = append(dst, session...)
	}
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

// SplitTagged splits an answer line (without its newline) into its tag and
// the plain answer after it; ok is false when the line has no valid tag.
func SplitTagged(line []byte) (tag, rest []byte, ok bool) {
	if len(line) < 2 || line[0] != '#' {
		return nil, nil, false
	}
	i := bytes.IndexByte(line, ' ')
	if i < 0 || !validTag(line[1:i]) {
		return nil, nil, false
	}
	return line[1:i], line[i+1:], true
}

// parseTagged validates the greeting: key TaggedVersion, an empty
// argument.
func parseTagged(req *Request) error {
	if string(req.Key) != TaggedVersion {
		return ErrBadKey
	}
	if len(req.Arg) != 0 {
		return ErrBadArg
	}
	return nil
}
