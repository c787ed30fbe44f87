package server

import (
	"github.com/panjf2000/gnet/v2"

	"github.com/latchd/latchd/engine"
)

// loop is one gnet event loop's context. When a request on this loop frees
// a slot, the engine hands the grants to the loop's Via: a waiter on the
// same loop is answered right after the current connection's turn, with
// no Wake and no trip through gnet's task queue.
type loop struct {
	// Event loop only.
	pending  []*session // waiters on this loop with an answer in their inbox
	draining bool
}

// Deliver implements engine.Via. It runs on this loop's goroutine, inside
// the turn of the connection whose request freed the slot.
func (l *loop) Deliver(sink engine.Sink, o engine.Outcome) {
	if tw, ok := sink.(*tagWait); ok && tw.ss.loop == l && o.Result != engine.Canceled {
		ss := tw.ss
		if ss.closed.Load() {
			tw.free() // a session's grant, kept for it: nobody to tell
			return
		}
		tw.enqueue(o)
		if ss.woken.CompareAndSwap(false, true) {
			l.pending = append(l.pending, ss) // else a Wake is on its way
		}
		return
	}
	w, ok := sink.(*session)
	if !ok || w.loop != l || o.Result == engine.Canceled {
		sink.Deliver(o)
		return
	}
	if w.direct(o) {
		return // parked idle: written now, no turn needed
	}
	w.enqueue(o)
	l.pending = append(l.pending, w)
}

// drain runs the turn of every session that Deliver queued, on this loop.
// A turn may free more slots and queue more sessions; they run too.
func (s *Server) drain(l *loop) {
	if l == nil || l.draining || len(l.pending) == 0 {
		return
	}
	l.draining = true
	for i := 0; i < len(l.pending); i++ {
		w := l.pending[i]
		l.pending[i] = nil
		if w.closed.Load() {
			continue // gnet may have given its Conn to a new connection
		}
		if c, ok := w.conn.(gnet.Conn); ok {
			if s.turn(c, w) == gnet.Close {
				_ = c.Close()
			}
		}
	}
	l.pending = l.pending[:0]
	l.draining = false
}

// loopOf returns the context of c's event loop, or nil when c has none.
func (s *Server) loopOf(c gnet.Conn) *loop {
	el := c.EventLoop()
	if el == nil {
		return nil
	}
	l, _ := s.loops.LoadOrStore(el, new(loop))
	return l.(*loop)
}
