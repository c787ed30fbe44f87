package client

import (
	"context"
	"errors"
	"time"
)

// Leader is who leads an election, as Observe reports it: the holder of
// the election's key. Present is false while nobody leads.
type Leader struct {
	Present   bool
	Fence     uint64 // the leader's fence, which rises with every new term
	OwnerKind string // "conn" or "session"
	Owner     uint64 // the server's id of the leader's connection or session
}

// observeRetry bounds the pause between two watches of an Observe.
const observeRetry = time.Second

// Observe calls fn with the current leader of the election, then with
// every change (a new leader, or none), until ctx is done; it returns
// ctx's error. It neither campaigns nor needs to: it watches the key
// (Conn.Watch). When the watch breaks (the server went away, a failover,
// a reset) it watches again, on the next of Servers' owner or Cluster's
// seeds, and reports the leader as it then is; a change missed meanwhile
// shows as the leader found. fn runs on Observe's goroutine; it is not
// called twice in a row with the same leader.
func (e *Election) Observe(ctx context.Context, fn func(Leader)) error {
	addrs := e.Cluster
	if len(addrs) == 0 {
		addrs = []string{ServerFor(e.Servers, e.Name)}
	}
	opts := append([]Option{WithAuthToken(e.AuthToken), WithTLS(e.TLSConfig)}, e.Options...)
	var last *Leader
	report := func(l Leader) {
		if last == nil || *last != l {
			last = &l
			fn(l)
		}
	}
	for i := 0; ; i++ {
		err := observeOnce(ctx, addrs[i%len(addrs)], e.Name, opts, report)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrBadRequest) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(observeRetry, time.Duration(i+1)*50*time.Millisecond)):
		}
	}
}

// observeOnce watches name on one server and reports its leaders until
// the watch ends.
func observeOnce(ctx context.Context, addr, name string, opts []Option, report func(Leader)) error {
	c, err := Dial(ctx, addr, opts...)
	if err != nil {
		return err
	}
	w, err := c.Watch(ctx, name, false)
	if err != nil {
		_ = c.Close()
		return err
	}
	defer w.Close()
	var cur Leader
	synced := false
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return err
		}
		switch ev.Kind {
		case "state", "granted":
			cur = Leader{}
			if ev.Fence != 0 {
				cur = Leader{Present: true, Fence: ev.Fence, OwnerKind: ev.OwnerKind, Owner: ev.Owner}
			}
		case "released", "expired", "dropped":
			if ev.Fence == cur.Fence {
				cur = Leader{}
			}
		case "synced":
			synced = true
		default:
			continue
		}
		if synced {
			report(cur)
		}
	}
}
