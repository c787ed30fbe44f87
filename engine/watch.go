package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Watching: a Watcher subscribes to one key or to every key with a prefix
// and receives an Event for each change of its holders and its queue, in
// the order the engine made them (events are published under the key's
// shard lock, so one key's events never reorder). On a replica the engine
// changes only by applying the log, so every node's watchers see one
// key's events in the same order.
//
// The hot path pays one atomic load per grant, release, loss or queue
// change while nobody watches. Events are bounded: each Watcher buffers
// at most HubLimits.Buffer of them and all Watchers together at most
// HubLimits.Total; a Watcher that would pass either is cut off
// (ErrWatchOverflow, after the events it had) rather than buffered
// without limit.

// EventKind names what happened to a key.
type EventKind uint8

// Event kinds.
const (
	// EventState describes the key as it was when the watch began: one
	// per holder (Fence, Owner), or one with Fence 0 when nothing holds
	// it. EventSynced follows the initial state of every key.
	EventState EventKind = iota + 1
	EventSynced
	EventGranted  // a slot was granted: Fence, Owner of the new holder
	EventReleased // a holder released its slot with its token
	EventExpired  // a holder's lease ran out
	EventDropped  // a holder's owner went away (disconnect, session end)
	EventWaiters  // a request joined or left the queue (not by a grant)
	// EventDelayEnded: a slot a lock-delay held back is free again (a
	// grant to the next waiter, if any, follows).
	EventDelayEnded
)

var eventNames = [...]string{"", "state", "synced", "granted", "released", "expired", "dropped", "waiters", "delay_ended"}

// String names the kind as the wire protocol writes it.
func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "invalid"
}

// Event is one change of a key. Holders and Waiters are the counts after
// it; Delayed the slots a lock-delay holds back after it.
type Event struct {
	Kind    EventKind
	Key     string
	Fence   uint64  // the holder's fence; 0 for none
	Owner   OwnerID // the holder's owner; 0 for none
	Limit   int
	Holders int
	Waiters int
	Delayed int
}

// Watch errors.
var (
	// ErrWatchOverflow: the Watcher fell too far behind and was cut off.
	ErrWatchOverflow = errors.New("engine: watch cut off: events not read fast enough")
	// ErrWatchReset: the state was replaced (a replica restored a
	// snapshot); the Watcher must watch again to see the new state.
	ErrWatchReset = errors.New("engine: watch reset: the state was replaced")
	// ErrWatchClosed: Close was called.
	ErrWatchClosed = errors.New("engine: watch closed")
	// ErrTooManyWatchers: HubLimits.Watchers are open.
	ErrTooManyWatchers = errors.New("engine: too many watchers")
)

// HubLimits bound what watching may buffer.
type HubLimits struct {
	Buffer   int // events one Watcher buffers before it is cut off
	Total    int // events all Watchers buffer together
	Watchers int // open Watchers
}

// DefaultHubLimits returns the documented defaults.
func DefaultHubLimits() HubLimits { return HubLimits{Buffer: 1024, Total: 1 << 16, Watchers: 1024} }

// Hub routes an engine's events to its Watchers. A replica keeps one Hub
// across the engines a snapshot restore replaces (AdoptHub).
type Hub struct {
	n      atomic.Int32 // open Watchers: the engine's one check
	mu     sync.Mutex
	lim    HubLimits
	exact  map[string][]*Watcher
	prefix []*Watcher
	total  int // events buffered over all Watchers
	open   int
}

func newHub() *Hub { return &Hub{lim: DefaultHubLimits(), exact: make(map[string][]*Watcher)} }

// SetLimits changes the limits for what is published from now on.
func (h *Hub) SetLimits(l HubLimits) {
	h.mu.Lock()
	h.lim = l
	h.mu.Unlock()
}

// Watchers returns how many Watchers are open.
func (h *Hub) Watchers() int { return int(h.n.Load()) }

// Hub returns the engine's Hub.
func (e *Engine) Hub() *Hub { return e.hub }

// AdoptHub makes e publish to h instead of its own Hub. Call it before e
// is used (a replica does, for the engine a snapshot restore builds).
func (e *Engine) AdoptHub(h *Hub) { e.hub = h }

// Watcher receives the events of one key or of a key prefix.
type Watcher struct {
	hub    *Hub
	key    string
	prefix bool
	ready  chan struct{} // a token when events (or the end) wait

	// Under hub.mu.
	buf    []Event // ring
	head   int
	n      int
	err    error // set when cut off, reset or closed: no more events
	linked bool
}

// Ready returns a channel that receives when Next has something.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// TryNext returns the oldest event not yet taken (ok), or the error that
// ended the watch once every event before it was taken, or neither.
func (w *Watcher) TryNext() (ev Event, ok bool, err error) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.n == 0 {
		return Event{}, false, w.err
	}
	ev = w.buf[w.head]
	w.buf[w.head] = Event{}
	w.head = (w.head + 1) % len(w.buf)
	w.n--
	h.total--
	return ev, true, nil
}

// Next waits for the next event, or for ctx.
func (w *Watcher) Next(ctx context.Context) (Event, error) {
	for {
		ev, ok, err := w.TryNext()
		if ok || err != nil {
			return ev, err
		}
		select {
		case <-w.ready:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Close ends the watch and frees its buffer.
func (w *Watcher) Close() {
	h := w.hub
	h.mu.Lock()
	h.endLocked(w, ErrWatchClosed)
	h.total -= w.n
	w.n = 0
	h.mu.Unlock()
}

// endLocked unlinks w and makes err its last word (the first error wins).
func (h *Hub) endLocked(w *Watcher, err error) {
	if w.err == nil {
		w.err = err
	}
	if !w.linked {
		return
	}
	w.linked = false
	h.open--
	h.n.Add(-1)
	isW := func(x *Watcher) bool { return x == w }
	if w.prefix {
		h.prefix = slices.DeleteFunc(h.prefix, isW)
	} else if ws := slices.DeleteFunc(h.exact[w.key], isW); len(ws) == 0 {
		delete(h.exact, w.key)
	} else {
		h.exact[w.key] = ws
	}
	signal(w)
}

// Reset ends every open Watcher with ErrWatchReset.
func (h *Hub) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ws := range h.exact {
		for _, w := range ws {
			h.endLocked(w, ErrWatchReset)
		}
	}
	for len(h.prefix) > 0 {
		h.endLocked(h.prefix[0], ErrWatchReset)
	}
}

func signal(w *Watcher) {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// pushLocked buffers ev for w, or cuts w off at a limit.
func (h *Hub) pushLocked(w *Watcher, ev *Event) {
	if !w.linked {
		return
	}
	if w.n == len(w.buf) || h.total >= h.lim.Total {
		h.endLocked(w, ErrWatchOverflow)
		return
	}
	w.buf[(w.head+w.n)%len(w.buf)] = *ev
	w.n++
	h.total++
	signal(w)
}

// publish hands ev to every Watcher of its key.
func (h *Hub) publish(ev *Event) {
	h.mu.Lock()
	ws := h.exact[ev.Key]
	for i := 0; i < len(ws); i++ {
		w := ws[i]
		h.pushLocked(w, ev)
		if !w.linked { // cut off: the list shifted down
			ws = h.exact[ev.Key]
			i--
		}
	}
	for i := 0; i < len(h.prefix); i++ {
		w := h.prefix[i]
		if strings.HasPrefix(ev.Key, w.key) {
			h.pushLocked(w, ev)
			if !w.linked {
				i-- // cut off: h.prefix shifted down
			}
		}
	}
	h.mu.Unlock()
}
