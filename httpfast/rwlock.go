package httpfast

import (
	"github.com/valyala/fasthttp"

	"github.com/latchd/latchd/engine"
)

// The read-write lock routes are the lock routes under /v1/rwlocks/, with
// the mode of an acquire or an enqueue in the query: ?mode=read (shared)
// or ?mode=write (exclusive). Release, renew and wait name the grant by
// its token or the session, as for a lock, and take no mode.

// rwModeOf reads the required ?mode= of a read-write acquire or enqueue.
func rwModeOf(ctx *fasthttp.RequestCtx) (engine.Mode, error) {
	switch string(ctx.QueryArgs().Peek("mode")) {
	case "read":
		return engine.ModeRead, nil
	case "write":
		return engine.ModeWrite, nil
	case "":
		return 0, bodyErr("mode is required: ?mode=read or ?mode=write")
	}
	return 0, bodyErr("mode must be read or write")
}

// rwModeName names the mode of a holder or waiter of a key with limit:
// "read" or "write" on a read-write key, "" on any other.
func rwModeName(limit int, shared bool) string {
	switch {
	case limit != engine.RWLimit:
		return ""
	case shared:
		return "read"
	}
	return "write"
}
