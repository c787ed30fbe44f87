package codec

// A tagged connection withdraws a request of its own that waits on the
// server with
//
//	#<tag> cancel[ <session-id>]\n<key>\n\n      the l, w, sl, sw, rl, wl, rw or ww waiting on key
//	#<tag> cancel[ <session-id>]\n<key>\nset\n   the ml or msl whose first key is key
//
// Only DecodeTagged knows the command: on a plain connection "cancel" is
// an unknown command, as it is to dflockd.

// cancelName is the cancel request's command word.
const cancelName = "cancel"

// CancelSet is the argument of a cancel request that withdraws a set.
const CancelSet = "set"

// parseCancel validates a cancel request: a key and an empty argument or
// CancelSet.
func parseCancel(req *Request) error {
	req.Cmd = CmdCancel
	if !ValidKey(req.Key) {
		return ErrBadKey
	}
	if len(req.Arg) != 0 && string(req.Arg) != CancelSet {
		return ErrBadArg
	}
	return nil
}
