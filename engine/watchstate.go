package engine

import "strings"

// Watch begins a watch of key, or with prefix of every key that starts
// with key ("" with prefix: every key). The Watcher first receives the
// state of each key it covers (EventState; for a single key also when the
// key does not exist), then EventSynced, then every change. It fails with
// ErrTooManyWatchers at HubLimits.Watchers; Close ends it.
func (e *Engine) Watch(key string, prefix bool) (*Watcher, error) {
	h := e.hub
	h.mu.Lock()
	if h.open >= h.lim.Watchers {
		h.mu.Unlock()
		return nil, ErrTooManyWatchers
	}
	h.open++
	h.n.Add(1)
	w := &Watcher{hub: h, key: key, prefix: prefix, ready: make(chan struct{}, 1), buf: make([]Event, max(h.lim.Buffer, 2))}
	h.mu.Unlock()
	if !prefix {
		// Linked under the key's shard lock: no change slips between the
		// state and the first event.
		s := e.shardFor([]byte(key))
		s.mu.Lock()
		h.mu.Lock()
		h.linkLocked(w)
		r := s.res[key]
		if r == nil {
			h.pushLocked(w, &Event{Kind: EventState, Key: key})
		} else {
			s.stateLocked(w, r)
		}
		h.mu.Unlock()
		s.mu.Unlock()
	} else {
		h.mu.Lock()
		h.linkLocked(w)
		h.mu.Unlock()
		for i := range e.shards {
			s := &e.shards[i]
			s.mu.Lock()
			h.mu.Lock()
			for k, r := range s.res {
				if strings.HasPrefix(k, key) && !r.idle {
					s.stateLocked(w, r)
				}
			}
			h.mu.Unlock()
			s.mu.Unlock()
		}
	}
	h.mu.Lock()
	h.pushLocked(w, &Event{Kind: EventSynced, Key: key})
	h.mu.Unlock()
	return w, nil
}

// linkLocked adds w to the Watchers events are published to. Watch has
// counted it in open and n already.
func (h *Hub) linkLocked(w *Watcher) {
	w.linked = true
	if w.prefix {
		h.prefix = append(h.prefix, w)
	} else {
		h.exact[w.key] = append(h.exact[w.key], w)
	}
}

// stateLocked pushes r's state to w: one EventState per holder, or one
// without a holder. Under s.mu and the hub's mu.
func (s *shard) stateLocked(w *Watcher, r *resource) {
	ev := Event{Kind: EventState, Key: r.key, Limit: r.limit, Holders: r.holders.n, Waiters: r.waiters.n, Delayed: r.reserved}
	if r.holders.n == 0 {
		s.e.hub.pushLocked(w, &ev)
		return
	}
	for en := r.holders.head; en != nil; en = en.qnext {
		ev.Fence, ev.Owner = en.token.Fence, en.owner
		s.e.hub.pushLocked(w, &ev)
	}
}

// watchLocked reads, once per change to s (lockW), whether anyone
// watches: the one atomic load watching costs a change. A Watcher linked
// meanwhile misses nothing: a single key's is linked under its shard's
// lock, and a prefix Watcher takes each shard's state after linking.
func (s *shard) watchLocked() { s.watched = s.e.hub.n.Load() != 0 }

// note publishes a change of res (by en, if not nil) when anyone watches.
// A holder's release or loss is noted before en leaves res.
func (s *shard) note(k EventKind, res *resource, en *entry) {
	if s.watched {
		s.noteSlow(k, res, en)
	}
}

func (s *shard) noteSlow(k EventKind, res *resource, en *entry) {
	ev := Event{Kind: k, Key: res.key, Limit: res.limit, Holders: res.holders.n, Waiters: res.waiters.n, Delayed: res.reserved}
	if en != nil {
		ev.Fence, ev.Owner = en.token.Fence, en.owner
	}
	switch k {
	case EventReleased, EventExpired, EventDropped:
		ev.Holders-- // en still holds
	}
	s.e.hub.publish(&ev)
}
