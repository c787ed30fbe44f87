package main

import (
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/replica"
)

// readiness is /readyz's check, on the REST port and on --metrics-addr:
// a single node is ready once its TCP listener and (when on) its REST
// listener accept; a cluster node also needs replica.Node.Ready (a known
// leader, its log applied). Stopping makes it not ready at once.
type readiness struct {
	tcp, http, stopping atomic.Bool
	httpOn              bool
	node                *replica.Node
}

func (r *readiness) check() error {
	switch {
	case r.stopping.Load():
		return errors.New("stopping")
	case !r.tcp.Load():
		return errors.New("the TCP listener is not accepting yet")
	case r.httpOn && !r.http.Load():
		return errors.New("the REST listener is not accepting yet")
	case r.node != nil:
		return r.node.Ready()
	}
	return nil
}

// refusalLogEvery is the least time between two refusal log lines.
const refusalLogEvery = 10 * time.Second

// logRefusals logs, at most once per every, how many requests the engine
// refused at each of its caps since the last line, until stop is closed.
func logRefusals(stop <-chan struct{}, eng func() *engine.Engine, every time.Duration, log *zap.Logger) {
	var last [3]uint64 // refusals at each cap below, when last logged
	var lastEng *engine.Engine
	clock.Every(stop, every, func() {
		e := eng()
		if e == nil {
			return
		}
		if e != lastEng { // first tick, or a snapshot restore replaced the engine: it counts from 0
			lastEng, last = e, [3]uint64{}
		}
		cfg := e.Config()
		keys, waiters := e.Refusals()
		now := [3]uint64{e.OwnerRefusals(), keys, waiters}
		for i, c := range [3]struct {
			msg, field string
			max        int
		}{
			{"requests refused at --max-keys-per-owner: one connection or session held or waited on its maximum of keys", "max_keys_per_owner", cfg.MaxKeysPerOwner},
			{"requests refused at --max-locks: no idle key to evict", "max_locks", cfg.MaxKeys},
			{"requests refused at --max-waiters: the key's queue was full", "max_waiters", cfg.MaxWaiters},
		} {
			if now[i] > last[i] {
				log.Warn(c.msg, zap.Uint64("refused", now[i]-last[i]), zap.Duration("in", every), zap.Int(c.field, c.max))
			}
		}
		last = now
	})
}

// logConnRefusals logs the TCP connections refused at the connection caps:
// the first at once (checked every poll), then at most one line per every,
// until stop is closed; a full listener is otherwise silent.
func logConnRefusals(stop <-chan struct{}, refused func() uint64, poll, every time.Duration, maxConns, perIP int, log *zap.Logger) {
	var last uint64
	var logged time.Time
	clock.Every(stop, poll, func() {
		n := refused()
		if n <= last || time.Since(logged) < every {
			return
		}
		log.Warn("connections refused at --max-connections or --max-connections-per-ip", zap.Uint64("refused", n-last),
			zap.Int("max_connections", maxConns), zap.Int("max_connections_per_ip", perIP))
		last, logged = n, time.Now()
	})
}
