package httpfast

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
)

// sseKeepalive is how often an idle event stream sends a comment line, so
// that proxies keep it open and a client that went away is noticed.
const sseKeepalive = 15 * time.Second

// watchEvent is an event as the REST API writes it.
type watchEvent struct {
	Kind      string `json:"kind"`
	Key       string `json:"key"`
	Fence     string `json:"fence"` // 16 hex digits, "" for none
	OwnerKind string `json:"owner_kind"`
	Owner     string `json:"owner"` // decimal, "" for none
	Limit     int    `json:"limit"`
	Holders   int    `json:"holders"`
	Waiters   int    `json:"waiters"`
	Delayed   int    `json:"delayed"`
}

func eventJSON(e *engine.Event) watchEvent {
	ev := watchEvent{Kind: e.Kind.String(), Key: e.Key, OwnerKind: backend.OwnerKind(e.Owner), Limit: e.Limit,
		Holders: e.Holders, Waiters: e.Waiters, Delayed: e.Delayed}
	if e.Fence != 0 {
		ev.Fence = fmt.Sprintf("%016x", e.Fence)
	}
	if e.Owner != 0 {
		ev.Owner = strconv.FormatUint(uint64(e.Owner), 10)
	}
	return ev
}

// serveWatch serves GET /v1/watch/{key}: with ?fence=F a long-poll that
// answers once the key is no longer held with fence F (or 409 timeout
// after timeout_s), otherwise a Server-Sent Events stream of the key's
// events (?prefix=1: of every key starting with it). No session is
// needed; a follower serves it from its own replica.
func (s *Server) serveWatch(ctx *fasthttp.RequestCtx, rawKey []byte) {
	var buf [maxKeyLen]byte
	key, ok := decodeKey(&buf, rawKey)
	if !ok {
		writeError(ctx, errBadRequest, "bad key: must be 1-256 bytes after URL-decoding, with no space, tab, CR or LF")
		return
	}
	q := ctx.QueryArgs()
	prefix := string(q.Peek("prefix"))
	if prefix != "" && prefix != "1" && prefix != "0" {
		writeError(ctx, errBadRequest, "prefix must be 1 or 0")
		return
	}
	if f := q.Peek("fence"); f != nil {
		s.waitChange(ctx, string(key), f, q.Peek("timeout_s"))
		return
	}
	w, err := s.be.Engine().Watch(string(key), prefix == "1")
	if err != nil {
		writeError(ctx, errTooManyWatchers, "the server's watchers are all taken")
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	conn := ctx.Conn()
	ctx.SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer w.Close()
		s.stream(bw, conn, w)
	})
}

// stream writes w's events to bw as Server-Sent Events until the watch
// ends (an error event last), the client goes away or the server stops.
func (s *Server) stream(bw *bufio.Writer, conn net.Conn, w *engine.Watcher) {
	tick := time.NewTicker(sseKeepalive)
	defer tick.Stop()
	for {
		for {
			e, ok, err := w.TryNext()
			if err != nil {
				code := "watch_closed"
				switch {
				case errors.Is(err, engine.ErrWatchOverflow):
					code = "watch_overflow"
				case errors.Is(err, engine.ErrWatchReset):
					code = "watch_reset"
				}
				_, _ = bw.WriteString("event: error\ndata: {\"error\":\"" + code + "\"}\n\n")
				_ = flush(bw, conn, s.cfg.WriteTimeout)
				return
			}
			if !ok {
				break
			}
			b, _ := json.Marshal(eventJSON(&e))
			_, _ = bw.WriteString("event: " + e.Kind.String() + "\ndata: ")
			_, _ = bw.Write(b)
			_, _ = bw.WriteString("\n\n")
		}
		if flush(bw, conn, s.cfg.WriteTimeout) != nil {
			return // the client went away, or stopped reading
		}
		select {
		case <-w.Ready():
		case <-tick.C:
			_, _ = bw.WriteString(": keepalive\n\n")
		case <-s.stopping:
			return
		}
	}
}

// flush writes what bw holds within timeout (0: no bound).
func flush(bw *bufio.Writer, conn net.Conn, timeout time.Duration) error {
	if timeout > 0 {
		_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	}
	return bw.Flush()
}

// waitChange answers the long-poll GET /v1/watch/{key}?fence=F.
func (s *Server) waitChange(ctx *fasthttp.RequestCtx, key string, rawFence, rawTimeout []byte) {
	fence, err := strconv.ParseUint(string(rawFence), 16, 64)
	if err != nil || len(rawFence) != 16 {
		writeError(ctx, errBadRequest, "fence must be 16 hex digits")
		return
	}
	var timeout time.Duration
	if rawTimeout != nil {
		t, err := strconv.ParseFloat(string(rawTimeout), 64)
		if err != nil || !(t >= 0) || t > maxSeconds {
			writeError(ctx, errBadRequest, "timeout_s must be a number in [0, 2147483647]")
			return
		}
		timeout = time.Duration(t * float64(time.Second))
	}
	w, err := s.be.Engine().Watch(key, false)
	if err != nil {
		writeError(ctx, errTooManyWatchers, "the server's watchers are all taken")
		return
	}
	defer w.Close()
	ev, found, err := changeOf(w, fence, timeout, s.stopping)
	switch {
	case err != nil:
		writeError(ctx, errShuttingDown, "the watch ended: "+err.Error())
	case !found:
		writeJSON(ctx, fasthttp.StatusConflict, bodyTimedOut)
	default:
		b, _ := json.Marshal(struct {
			Status string     `json:"status"`
			Event  watchEvent `json:"event"`
		}{"changed", eventJSON(&ev)})
		writeJSON(ctx, fasthttp.StatusOK, b)
	}
}

// changeOf reads w until the key is not held with fence: the state or the
// event that shows it, or found false at timeout.
func changeOf(w *engine.Watcher, fence uint64, timeout time.Duration, stop <-chan struct{}) (engine.Event, bool, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	held, last := false, engine.Event{}
	synced := false
	for {
		e, ok, err := w.TryNext()
		switch {
		case err != nil:
			return engine.Event{}, false, err
		case !ok:
			if !synced {
				continue // the initial state is published before Watch returns
			}
			select {
			case <-w.Ready():
			case <-timer.C:
				return engine.Event{}, false, nil
			case <-stop:
				return engine.Event{}, false, errors.New("the server is stopping")
			}
			continue
		}
		switch e.Kind {
		case engine.EventState:
			held = held || e.Fence == fence
			last = e
		case engine.EventSynced:
			synced = true
			if !held {
				return last, true, nil
			}
		case engine.EventReleased, engine.EventExpired, engine.EventDropped:
			if e.Fence == fence {
				return e, true, nil
			}
		}
	}
}
