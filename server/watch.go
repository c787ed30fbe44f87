package server

import (
	"errors"
	"time"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// watchBacklog is how many unsent bytes a watching connection may have
// before its events are left in its Watcher; watchPoll how often it is
// looked at again meanwhile.
const (
	watchBacklog = 64 << 10
	watchPoll    = 5 * time.Millisecond
)

// watch turns the connection into an event stream: it answers ok, then
// every event of the key (or prefix) watched, and reads no more requests
// (the session stays parked; bytes sent after watch are held, and past
// MaxParked the connection is closed as for any parked request). A
// follower serves it from its own replica: watching is a read.
func (s *Server) watch(ss *session, req *codec.Request, out []byte) ([]byte, bool) {
	w, err := s.be.Engine().Watch(string(req.Key), req.Prefix)
	if err != nil {
		return codec.AppendStatus(out, codec.StatusErrorMaxWatchers), false
	}
	ss.watcher, ss.parked = w, true
	go ss.pump(w)
	return codec.AppendStatus(out, codec.StatusOK), false
}

// pump moves w's events into the session's inbox and wakes its loop,
// until the watch ends. A watch cut off or reset leaves its error line
// last, and the connection's next turn closes it.
func (ss *session) pump(w *engine.Watcher) {
	var ev codec.Event
	for range w.Ready() {
		// A reader that falls behind leaves its events in the Watcher,
		// which cuts it off at its buffer: never more than watchBacklog
		// bytes of them wait here. A turn (wake) refreshes unsent.
		for ss.unsent.Load() > watchBacklog && !ss.closed.Load() {
			ss.wake()
			time.Sleep(watchPoll)
		}
		ss.mu.Lock()
		var end error
		for {
			e, ok, err := w.TryNext()
			if !ok {
				end = err
				break
			}
			ss.inbox = codec.AppendEvent(ss.inbox, eventOf(&e, &ev))
		}
		switch {
		case errors.Is(end, engine.ErrWatchOverflow):
			ss.inbox = codec.AppendStatus(ss.inbox, codec.StatusErrorWatchOverflow)
		case errors.Is(end, engine.ErrWatchReset):
			ss.inbox = codec.AppendStatus(ss.inbox, codec.StatusErrorWatchReset)
		}
		if end != nil {
			ss.watchEnded.Store(true)
		}
		ss.mu.Unlock()
		ss.wake()
		if end != nil {
			return
		}
	}
}

// eventOf fills ev, the wire form of e, and returns it.
func eventOf(e *engine.Event, ev *codec.Event) *codec.Event {
	*ev = codec.Event{Kind: []byte(e.Kind.String()), Key: []byte(e.Key), Fence: e.Fence,
		OwnerKind: []byte(backend.OwnerKind(e.Owner)), Owner: uint64(e.Owner), Limit: int64(e.Limit),
		Holders: int64(e.Holders), Waiters: int64(e.Waiters), Delayed: int64(e.Delayed)}
	return ev
}

// endWatch ends the connection's watch, if any, when it closes.
func (ss *session) endWatch() {
	if ss.watcher != nil {
		ss.watcher.Close()
	}
}
