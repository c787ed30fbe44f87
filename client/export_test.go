package client

import (
	"context"
	"time"
)

// SetRenewHook makes the renewal goroutine of l's next grants call f
// before each renewal, with the context that bounds it; f may block to
// simulate a paused process.
func SetRenewHook(l *Lock, f func(context.Context)) {
	l.l.mu.Lock()
	l.l.renewHook = f
	l.l.mu.Unlock()
}

// KillElection closes the socket of the leader's connection as if the
// process died, without telling the Election.
func KillElection(e *Election) {
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	if e.l.cur != nil {
		killConn(e.l.cur.conn)
	}
}

func killConn(lc commander) {
	switch c := lc.(type) {
	case *Conn:
		_ = c.nc.Close() // a dead process closes no further
	case *Cluster:
		c.mu.Lock()
		if c.conn != nil {
			_ = c.conn.nc.Close()
		}
		c.mu.Unlock()
	}
}

// LeaseEnd returns the local end of l's current grant (zero without one).
func LeaseEnd(l *Lock) time.Time {
	l.l.mu.Lock()
	defer l.l.mu.Unlock()
	if l.l.cur == nil {
		return time.Time{}
	}
	return l.l.cur.until()
}

// HomeConn is homeConn: the connection, of n, a Mux sends key's requests to.
func HomeConn(key string, n int) int { return int(homeConn(key, n)) }
