package httpfast

import (
	"crypto/tls"
	"maps"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

// A REST client that gives up on a blocking acquire or wait closes its
// connection while the handler is parked, which fasthttp cannot tell: the
// request would stay queued and be granted to nobody. So a parked handler
// registers its connection with the server's connWatch, whose one
// goroutine polls every registered socket each goneEvery without reading
// it (POLLRDHUP on Linux). A handler whose client is gone (or half-closed,
// as in net/http) withdraws its request and releases a racing grant.

// goneEvery is how often parked requests' connections are checked.
const goneEvery = 100 * time.Millisecond

// connWatch checks the connections of parked handlers for a client that
// went away. Its goroutine runs only while something is registered.
type connWatch struct {
	mu      sync.Mutex
	conns   map[*watched]struct{}
	running bool
}

// watched is one parked handler's connection; gone is closed when the
// client has gone away.
type watched struct {
	rc   syscall.RawConn
	gone chan struct{}
}

// goneCh returns the channel closed when x's client goes away; nil (never
// ready) for a connection that cannot be watched.
func (x *watched) goneCh() <-chan struct{} {
	if x == nil {
		return nil
	}
	return x.gone
}

// rawConn returns the socket under c (a TLS connection's too), or nil
// when c has none (an in-memory listener's).
func rawConn(c net.Conn) syscall.RawConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// watch registers c; unwatch must follow. It returns nil when c cannot be
// watched (no socket, or a platform without peerGone).
func (w *connWatch) watch(c net.Conn) *watched {
	if !canWatch || c == nil {
		return nil
	}
	rc := rawConn(c)
	if rc == nil {
		return nil
	}
	x := &watched{rc: rc, gone: make(chan struct{})}
	w.mu.Lock()
	if w.conns == nil {
		w.conns = make(map[*watched]struct{})
	}
	w.conns[x] = struct{}{}
	if !w.running {
		w.running = true
		go w.loop()
	}
	w.mu.Unlock()
	return x
}

// unwatch forgets x (nil is fine).
func (w *connWatch) unwatch(x *watched) {
	if x == nil {
		return
	}
	w.mu.Lock()
	delete(w.conns, x)
	w.mu.Unlock()
}

// loop checks every registered connection each goneEvery and closes gone
// for those whose client went away. It returns when nothing is left.
func (w *connWatch) loop() {
	t := time.NewTicker(goneEvery)
	defer t.Stop()
	var batch []*watched
	for range t.C {
		w.mu.Lock()
		if len(w.conns) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		batch = slices.AppendSeq(batch[:0], maps.Keys(w.conns))
		w.mu.Unlock()
		for i, x := range batch {
			// Control holds the descriptor open, so a closed connection
			// fails it rather than poll a reused descriptor.
			if peerGone(x.rc) {
				w.mu.Lock()
				if _, ok := w.conns[x]; ok {
					delete(w.conns, x)
					close(x.gone)
				}
				w.mu.Unlock()
			}
			batch[i] = nil
		}
	}
}
