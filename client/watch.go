package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchd/latchd/codec"
)

// Watch errors.
var (
	// ErrMaxWatchers reports a watch refused because the server's
	// watchers are all taken (error_max_watchers). The Conn stays usable.
	ErrMaxWatchers = errors.New("client: the server's watchers are all taken")
	// ErrWatchOverflow reports a watch the server cut off because its
	// events were not read fast enough (error_watch_overflow).
	ErrWatchOverflow = errors.New("client: watch cut off: events not read fast enough")
	// ErrWatchReset reports a watch ended because the server replaced
	// its state (a cluster follower restored a snapshot): watch again.
	ErrWatchReset = errors.New("client: watch reset by the server")
)

// Event is one change of a watched key. Kind is one of "state" (the
// key as it was when the watch began: one per holder, or one with Fence
// 0), "synced" (the initial state is complete), "granted", "released",
// "expired" (the lease ran out), "dropped" (the holder's connection or
// session went away), "waiters" (the queue changed) or "delay_ended" (a
// slot a lock-delay held back is free again). Holders, Waiters
// and Delayed (slots a lock-delay holds back) are the counts after it.
type Event struct {
	Kind      string
	Key       string
	Fence     uint64 // the holder's fence; 0 for none
	OwnerKind string // "conn", "session", or "-" for none
	Owner     uint64 // the server's id of the holder's connection or session
	Limit     int
	Holders   int
	Waiters   int
	Delayed   int
}

// Watcher reads the events of a watch. It owns the connection it was
// made on.
type Watcher struct {
	c *Conn
}

// Watch turns the Conn into a stream of the events of key (with prefix,
// of every key that starts with key). The Conn serves nothing else from
// then on (other calls return an error wrapping ErrClosed); Close the
// Watcher to end the watch. A follower of a cluster serves watches too,
// from its own replica, in the order the log applies.
func (c *Conn) Watch(ctx context.Context, key string, prefix bool) (*Watcher, error) {
	if err := checkKey(key, 1); err != nil {
		return nil, err
	}
	var arg []byte
	if prefix {
		arg = []byte("prefix")
	}
	r, err := c.roundTrip(ctx, codec.CmdWatch, key, arg, 0, nil)
	if err != nil {
		return nil, err
	}
	switch r.Status {
	case codec.StatusOK:
	case codec.StatusErrorMaxWatchers:
		return nil, ErrMaxWatchers
	default:
		return nil, c.fail(errorFor(r, fmt.Errorf("%w: watch refused", ErrProtocol)))
	}
	c.mu.Lock() // every other call now fails
	if c.err == nil {
		c.err = fmt.Errorf("%w: the connection carries a watch", ErrClosed)
	}
	c.mu.Unlock()
	return &Watcher{c: c}, nil
}

// Next returns the next event, waiting for it as long as ctx allows. A
// done ctx closes the watch.
func (w *Watcher) Next(ctx context.Context) (Event, error) {
	c := w.c
	if err := c.nc.SetReadDeadline(time.Time{}); err != nil {
		return Event{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetReadDeadline(time.Unix(1, 0)) })
	line, err := c.readLine()
	if !stop() {
		_ = c.nc.Close()
		return Event{}, ctx.Err()
	}
	if err != nil {
		_ = c.nc.Close()
		return Event{}, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	line = line[:len(line)-1]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	switch string(line) {
	case "error_watch_overflow":
		_ = c.nc.Close()
		return Event{}, ErrWatchOverflow
	case "error_watch_reset":
		_ = c.nc.Close()
		return Event{}, ErrWatchReset
	}
	var ev codec.Event
	if err := codec.DecodeEvent(line, &ev); err != nil {
		_ = c.nc.Close()
		return Event{}, fmt.Errorf("%w: event line %q", ErrProtocol, line)
	}
	return Event{Kind: string(ev.Kind), Key: string(ev.Key), Fence: ev.Fence, OwnerKind: string(ev.OwnerKind),
		Owner: ev.Owner, Limit: int(ev.Limit), Holders: int(ev.Holders), Waiters: int(ev.Waiters),
		Delayed: int(ev.Delayed)}, nil
}

// Close ends the watch and closes its connection.
func (w *Watcher) Close() error { return w.c.nc.Close() }

// WaitChange waits until key is no longer held with fence (the holder
// whose grant carried it released, expired or went away), for as long as
// ctx allows, on a connection of its own to addr. It returns at once when
// that is already so. The Event is what showed the change: the key's
// state, or the release, expiry, drop or next grant.
func WaitChange(ctx context.Context, addr, key string, fence uint64, opts ...Option) (Event, error) {
	c, err := Dial(ctx, addr, opts...)
	if err != nil {
		return Event{}, err
	}
	w, err := c.Watch(ctx, key, false)
	if err != nil {
		_ = c.Close()
		return Event{}, err
	}
	defer w.Close()
	held, last := false, Event{}
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return Event{}, err
		}
		switch ev.Kind {
		case "state":
			held = held || ev.Fence == fence
			last = ev
		case "synced":
			if !held {
				return last, nil
			}
		case "released", "expired", "dropped":
			if ev.Fence == fence {
				return ev, nil
			}
		}
	}
}
