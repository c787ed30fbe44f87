package replica

import "errors"

// ErrUnknownOutcome means a command entered the log but leadership was
// lost before it committed: a later leader may or may not apply it. The
// caller must not assume either; a client should treat the request's fate
// as unknown (a grant it never heard of runs out with its lease).
var ErrUnknownOutcome = errors.New("replica: outcome unknown: leadership lost after the command was logged")
