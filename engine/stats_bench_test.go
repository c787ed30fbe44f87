package engine

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// statsKeys is the key count the stats benchmarks run at: the issue asks
// that stats stay cheap with 100,000 keys.
const statsKeys = 100_000

// newStatsEngine returns an engine holding statsKeys keys: half held
// locks (a tenth of them with a waiter), a fifth semaphores with two
// holders, the rest idle locks.
func newStatsEngine(b *testing.B) *Engine {
	b.Helper()
	e := newTestEngine(b, func(c *Config) { c.MaxKeys = 0 })
	var key []byte
	owner := OwnerID(0)
	for i := range statsKeys {
		key = strconv.AppendInt(append(key[:0], "stats-key-"...), int64(i), 10)
		owner++
		switch {
		case i%10 < 5:
			if _, err := e.Acquire(0, AcquireReq{Key: key, Owner: owner, Limit: 1, TTL: time.Hour}, nil); err != nil {
				b.Fatal(err)
			}
			if i%10 == 0 {
				owner++
				if _, err := e.Acquire(0, AcquireReq{Key: key, Owner: owner, Limit: 1, TTL: time.Hour, Timeout: time.Hour}, nopSink{}); err != nil {
					b.Fatal(err)
				}
			}
		case i%10 < 7:
			for range 2 {
				owner++
				if _, err := e.Acquire(0, AcquireReq{Key: key, Owner: owner, Limit: 4, TTL: time.Hour}, nil); err != nil {
					b.Fatal(err)
				}
			}
		default:
			out, err := e.Acquire(0, AcquireReq{Key: key, Owner: owner, Limit: 1, TTL: time.Hour}, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := e.Release(0, key, out.Token); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, g := e.Metrics(); g.Keys != statsKeys {
		b.Fatalf("engine holds %d keys; want %d", g.Keys, statsKeys)
	}
	return e
}

type nopSink struct{}

func (nopSink) Deliver(Outcome) {}

// BenchmarkStats100k measures what a scrape (Metrics) and the stats
// command (Snapshot, then its JSON encoding in the server) cost with
// 100,000 keys in memory.
func BenchmarkStats100k(b *testing.B) {
	e := newStatsEngine(b)
	b.Run("metrics", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, g := e.Metrics()
			if g.Keys != statsKeys || c.Grants == 0 {
				b.Fatal(c, g)
			}
		}
	})
	b.Run("snapshot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			st := e.Snapshot(int64(time.Second))
			if len(st.Locks)+len(st.Semaphores)+len(st.IdleLocks) != statsKeys {
				b.Fatalf("snapshot has %d+%d+%d keys", len(st.Locks), len(st.Semaphores), len(st.IdleLocks))
			}
		}
	})
	b.Run("snapshot+json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			body, err := json.Marshal(e.Snapshot(int64(time.Second)))
			if err != nil || len(body) == 0 {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
		}
	})
}
