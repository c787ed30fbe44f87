// Package listen keeps latchd's listeners alive through accept errors.
//
// Guard wraps a net.Listener so that Accept never returns EMFILE or
// another resource error: it counts and logs it (at most once a second),
// backs off (5 ms doubling to 1 s) and tries again. A Set tells which of
// its listeners cannot take a connection now, for /healthz.
package listen

import (
	"cmp"
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Backoff bounds: the first retry after a resource error waits MinBackoff,
// each further failure doubles it, up to MaxBackoff.
const (
	MinBackoff = 5 * time.Millisecond
	MaxBackoff = time.Second
)

// logEvery rate-limits the accept-error log line of one listener.
const logEvery = time.Second

// Set is the guarded listeners of one process. Its zero value is not
// usable: build it with NewSet.
type Set struct {
	log   *zap.Logger
	count func(listener, reason string) // may be nil
	free  func() bool                   // whether a descriptor is free now: fdAvailable

	mu  sync.Mutex
	all []*Guard
}

// NewSet returns a Set that logs to log and reports each accept error to
// count (a metric; nil: none).
func NewSet(log *zap.Logger, count func(listener, reason string)) *Set {
	log = cmp.Or(log, zap.NewNop())
	return &Set{log: log, count: count, free: fdAvailable}
}

// Wrap guards ln under name (tcp, http, metrics, debug: the metric's
// listener label). On a nil Set it guards ln all the same, unlogged and
// unreported.
func (s *Set) Wrap(name string, ln net.Listener) net.Listener {
	if s == nil {
		s = NewSet(nil, nil)
	}
	g := &Guard{Listener: ln, name: name, set: s, nudge: make(chan struct{}, 1)}
	s.mu.Lock()
	s.all = append(s.all, g)
	s.mu.Unlock()
	return g
}

// Down returns the names of the listeners that cannot take a connection
// now, sorted: those sleeping a backoff step after an accept error, and
// those that ran out of descriptors while the process still has none
// free. A closed listener is not down; a nil Set has none. It answers
// for the present, not from the last accept, which may wait for a client
// that waits for /healthz.
func (s *Set) Down() []string {
	if s == nil {
		return nil
	}
	var down []string
	s.mu.Lock()
	for _, g := range s.all {
		if g.down() {
			down = append(down, g.name)
		}
	}
	s.mu.Unlock()
	slices.Sort(down)
	return down
}

// Guard is a net.Listener whose Accept retries every error but
// net.ErrClosed.
type Guard struct {
	net.Listener
	name string
	set  *Set

	// short: a resource error since the last accept, or since a backoff
	// step that ended with a descriptor free. backing: sleeping a backoff
	// step. Either may be set while Accept waits for a client: a Report
	// from another goroutine, or a step that ended with none free.
	short   atomic.Bool
	backing atomic.Bool
	closed  atomic.Bool
	nudge   chan struct{} // one slot: a descriptor was freed

	owed atomic.Bool // Report asked for a backoff before the next accept

	// Accept's goroutine only (a listener has one accept loop).
	wait time.Duration // the current backoff; 0 when accepting

	logMu      sync.Mutex // Accept and Report may log at once
	lastLog    time.Time
	suppressed int
}

// Accept returns the next connection. It returns an error only once the
// listener is closed.
func (g *Guard) Accept() (net.Conn, error) {
	if g.owed.Swap(false) {
		g.backoff()
	}
	for {
		c, err := g.Listener.Accept()
		if err == nil {
			if g.short.Load() {
				g.short.Store(false)
			}
			g.wait = 0
			return c, nil
		}
		if errors.Is(err, net.ErrClosed) || g.closed.Load() {
			return nil, err
		}
		if g.record(err) {
			g.backoff()
		}
	}
}

// Report records an error taking over a connection Accept returned (a
// descriptor that could not be duplicated, say) as an accept error. Any
// goroutine may call it.
func (g *Guard) Report(err error) {
	if g.record(err) {
		g.owed.Store(true)
	}
}

// record counts and logs an accept error and reports whether it calls for
// a backoff; it marks descriptors short if so.
func (g *Guard) record(err error) bool {
	reason, resource := classify(err)
	if resource {
		// Before the count, so that whoever sees the count sees the
		// listener down. A peer that went away before its turn
		// (ECONNABORTED, ECONNRESET) is not: nothing to wait for.
		g.short.Store(true)
	}
	if g.set.count != nil {
		g.set.count(g.name, reason)
	}
	g.logError(err, reason)
	return resource
}

// backoff sleeps the next backoff step, or until Freed is called, then
// clears the shortage if a descriptor is free: it may have nobody to
// accept, and Accept says otherwise if it fails again.
func (g *Guard) backoff() {
	g.backing.Store(true)
	defer g.backing.Store(false)
	g.wait = min(max(g.wait*2, MinBackoff), MaxBackoff)
	t := time.NewTimer(g.wait)
	select {
	case <-t.C:
	case <-g.nudge:
		t.Stop()
	}
	if g.set.free() {
		g.short.Store(false)
	}
}

// Freed tells the Guard that a connection of its listener closed, so a
// descriptor may be free: a backoff step under way, or the next one, ends
// at once. It never blocks.
func (g *Guard) Freed() {
	select {
	case g.nudge <- struct{}{}:
	default:
	}
}

// Close closes the listener; a Guard in backoff notices at its next try.
// Closing it again does nothing.
func (g *Guard) Close() error {
	if !g.closed.CompareAndSwap(false, true) {
		return nil
	}
	return g.Listener.Close()
}

// down: sleeping a backoff step, or short of descriptors with none free
// now. A listener short of them whose process has one free is not down:
// its next accept takes it, whether Accept is about to call the kernel
// or waits there for a client.
func (g *Guard) down() bool {
	if g.closed.Load() {
		return false
	}
	return g.backing.Load() || (g.short.Load() && !g.set.free())
}

func (g *Guard) logError(err error, reason string) {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	now := time.Now()
	if !g.lastLog.IsZero() && now.Sub(g.lastLog) < logEvery {
		g.suppressed++
		return
	}
	g.set.log.Warn("accept failed; backing off", zap.String("listener", g.name),
		zap.String("reason", reason), zap.Int("suppressed", g.suppressed), zap.Error(err))
	g.lastLog, g.suppressed = now, 0
}

// classify names an accept error for the metric and says whether it is a
// shortage of a resource (descriptors, buffers, memory) that calls for a
// backoff.
func classify(err error) (reason string, resource bool) {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return "other", true
	}
	switch errno {
	case syscall.EMFILE:
		return "emfile", true
	case syscall.ENFILE:
		return "enfile", true
	case syscall.ENOBUFS:
		return "enobufs", true
	case syscall.ENOMEM:
		return "enomem", true
	case syscall.ECONNABORTED:
		return "econnaborted", false
	case syscall.ECONNRESET:
		return "econnreset", false
	case syscall.EINTR:
		return "eintr", false
	}
	return "other", true
}

// fdAvailable reports whether the process can open a descriptor now.
func fdAvailable() bool {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}
