package codec

import (
	"bytes"
	"encoding/hex"
	"strconv"
)

// A watch request (watch, key, "" or "prefix") is answered ok, and from
// then on the connection carries event lines, one per change of a key
// watched, and reads no more requests:
//
//	event <kind> <key> <fence> <owner-kind> <owner-id> <limit> <holders> <waiters> <delayed>
//
// kind is state, synced, granted, released, expired, dropped, waiters or
// delay_ended;
// fence is 16 lowercase hex digits (all zero for none); owner-kind is
// conn (a TCP connection), session (a REST session) or - (none), and
// owner-id its decimal id (0 for none). A stream ends with
// error_watch_overflow or error_watch_reset, then the server closes it.

// EventWord opens every event line.
const EventWord = "event"

// Event is one decoded event line. Kind, Key and OwnerKind alias the
// buffer given to DecodeEvent.
type Event struct {
	Kind      []byte
	Key       []byte
	Fence     uint64
	OwnerKind []byte
	Owner     uint64
	Limit     int64
	Holders   int64
	Waiters   int64
	Delayed   int64
}

// parseWatch checks a watch's argument: none, or the word prefix.
func parseWatch(req *Request) error {
	switch string(bytes.TrimSpace(req.Arg)) {
	case "":
	case "prefix":
		req.Prefix = true
	default:
		return ErrArgCount
	}
	return nil
}

// AppendEvent appends ev as an event line.
func AppendEvent(dst []byte, ev *Event) []byte {
	dst = append(dst, EventWord...)
	dst = append(dst, ' ')
	dst = append(dst, ev.Kind...)
	dst = append(dst, ' ')
	dst = append(dst, ev.Key...)
	dst = append(dst, ' ')
	var f [8]byte
	for i := range f {
		f[i] = byte(ev.Fence >> (56 - 8*i))
	}
	dst = hex.AppendEncode(dst, f[:])
	dst = append(dst, ' ')
	dst = append(dst, ev.OwnerKind...)
	for _, n := range [...]int64{int64(ev.Owner), ev.Limit, ev.Holders, ev.Waiters, ev.Delayed} {
		dst = append(dst, ' ')
		if n < 0 { // an owner id above 2^63: a REST session's
			dst = strconv.AppendUint(dst, uint64(n), 10)
			continue
		}
		dst = strconv.AppendInt(dst, n, 10)
	}
	return append(dst, '\n')
}

// DecodeEvent decodes one event line (without its newline).
func DecodeEvent(line []byte, ev *Event) error {
	var f [10][]byte
	if n := fields(line, f[:]); n != len(f) || string(f[0]) != EventWord {
		return ErrBadResponse
	}
	*ev = Event{Kind: f[1], Key: f[2], OwnerKind: f[4]}
	fence, err := strconv.ParseUint(string(f[3]), 16, 64)
	if err != nil || len(f[3]) != 16 {
		return ErrBadResponse
	}
	ev.Fence = fence
	if ev.Owner, err = strconv.ParseUint(string(f[5]), 10, 64); err != nil {
		return ErrBadResponse
	}
	for i, dst := range [...]*int64{&ev.Limit, &ev.Holders, &ev.Waiters, &ev.Delayed} {
		if *dst, err = strconv.ParseInt(string(f[6+i]), 10, 64); err != nil || *dst < 0 {
			return ErrBadResponse
		}
	}
	return nil
}
