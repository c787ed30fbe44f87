package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// sec is one second in the engine's Unix nanoseconds.
const sec = int64(time.Second)

// heard is one Outcome a recorder's Sink was given, tagged with who asked.
type heard struct {
	owner OwnerID
	key   string
	out   Outcome
}

func (h heard) String() string { return fmt.Sprintf("%d:%s:%s", h.owner, h.key, h.out.Result) }

// recorder collects every Outcome delivered to its sinks, in order.
type recorder struct {
	mu  sync.Mutex
	got []heard
}

// sink returns a Sink that records into r under owner and key.
func (r *recorder) sink(owner OwnerID, key string) Sink {
	return &tagSink{r: r, owner: owner, key: key}
}

// take returns what was delivered since the last take and forgets it.
func (r *recorder) take() []heard {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

type tagSink struct {
	r     *recorder
	owner OwnerID
	key   string
	n     int // deliveries to this sink; must stay <= 1
}

func (s *tagSink) Deliver(o Outcome) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.n++
	if s.n > 1 {
		panic(fmt.Sprintf("sink of owner %d on %q delivered %d times", s.owner, s.key, s.n))
	}
	s.r.got = append(s.r.got, heard{owner: s.owner, key: s.key, out: o})
}

// newTestEngine returns an engine with DefaultConfig changed by edit.
func newTestEngine(tb testing.TB, edit func(*Config)) *Engine {
	tb.Helper()
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%+v): %v", cfg, err)
	}
	return e
}

// mustGrant acquires key for owner at now and fails unless it is granted.
func mustGrant(tb testing.TB, e *Engine, now int64, req AcquireReq) Outcome {
	tb.Helper()
	out, err := e.Acquire(now, req, nil)
	if err != nil || out.Result != Granted {
		tb.Fatalf("Acquire(%d, owner %d, %q) = %v, %v; want granted", now, req.Owner, req.Key, out.Result, err)
	}
	return out
}
