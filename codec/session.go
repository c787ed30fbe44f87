package codec

// A session request names the session a connection acts for, so that what
// it holds and waits for outlives the connection for a while (a cluster's
// orphan TTL) and a new connection can take it back:
//
//	session\n_\n\n            open a new session for this connection
//	session\n<id>\n\n         attach this connection to session <id>
//	session\n<id>\nclose\n    close session <id>, releasing what it holds
//
// dflockd clients never send it.

// SessionNew is the key line of a session request that opens a new session.
const SessionNew = "_"

// SessionClose is the argument of a session request that closes it.
const SessionClose = "close"

// parseSession validates a session request: a key (SessionNew or a session
// id) and an empty argument or SessionClose.
func parseSession(req *Request) error {
	if !ValidKey(req.Key) {
		return ErrBadKey
	}
	if len(req.Arg) != 0 && string(req.Arg) != SessionClose {
		return ErrBadArg
	}
	return nil
}
