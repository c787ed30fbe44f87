package engine

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chanSink hands a parked request's Outcome to the goroutine that asked.
type chanSink chan Outcome

func (c chanSink) Deliver(o Outcome) { c <- o }

// TestConcurrentOwners runs many owners on few keys at once, acquiring,
// renewing and releasing (directly and two-phase), while a clock goroutine
// advances time and calls Expire. Meant for -race. It checks that a key
// never has more holders than its limit, that every grant is released
// exactly once, and that a key's fence numbers only rise.
func TestConcurrentOwners(t *testing.T) {
	const (
		owners = 16
		rounds = 1000
	)
	keys := []struct {
		name  string
		limit int
	}{{"lock-a", 1}, {"lock-b", 1}, {"sem-c", 3}}
	e := newTestEngine(t, func(c *Config) { c.Shards = 2; c.GCMaxIdle = 0 })

	type keyStats struct {
		held        atomic.Int64  // holders right now, as the owners see it
		maxReleased atomic.Uint64 // the largest fence released so far
	}
	stats := make([]keyStats, len(keys))
	var grants, releases, timeouts atomic.Int64

	var clock atomic.Int64 // engine time in ns; leases (100 years) never run out
	clock.Store(sec)
	stop := make(chan struct{})
	clockDone := make(chan struct{})
	go func() { // the expiry goroutine: 1 ms of engine time per step
		defer close(clockDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.Expire(clock.Add(int64(time.Millisecond)))
			runtime.Gosched()
		}
	}()

	errs := make(chan error, owners)
	var wg sync.WaitGroup
	for o := range owners {
		wg.Go(func() {
			owner := OwnerID(o + 1)
			rng := rand.New(rand.NewPCG(uint64(o), 42))
			sink := make(chanSink, 1)
			fail := func(format string, args ...any) {
				errs <- fmt.Errorf("owner %d: "+format, append([]any{owner}, args...)...)
			}
			for range rounds {
				ki := rng.IntN(len(keys))
				k := keys[ki]
				ks := &stats[ki]
				before := ks.maxReleased.Load()
				req := AcquireReq{Key: []byte(k.name), Owner: owner, Limit: k.limit, TTL: 100 * 365 * 24 * time.Hour,
					Timeout: time.Duration(rng.IntN(30)) * time.Millisecond, Salt: rng.Uint64()}
				var out Outcome
				var err error
				if rng.IntN(4) == 0 { // two-phase
					out, err = e.Enqueue(clock.Load(), req)
					if err == nil && out.Result == Queued {
						out, err = e.Wait(clock.Load(), req.Key, owner, req.Timeout, sink)
					}
				} else {
					out, err = e.Acquire(clock.Load(), req, sink)
				}
				if err != nil {
					fail("acquire %s: %v", k.name, err)
					return
				}
				if out.Result == Queued {
					out = <-sink
				}
				switch out.Result {
				case TimedOut:
					timeouts.Add(1)
					continue
				case Granted:
				default:
					fail("acquire %s: %v", k.name, out.Result)
					return
				}
				grants.Add(1)
				if n := ks.held.Add(1); n > int64(k.limit) {
					fail("%s has %d holders, limit %d", k.name, n, k.limit)
				}
				if out.Token.Fence <= before {
					fail("%s granted fence %d after fence %d was released", k.name, out.Token.Fence, before)
				}
				if rng.IntN(3) == 0 {
					if _, err := e.Renew(clock.Load(), req.Key, out.Token, 0); err != nil {
						fail("renew %s: %v", k.name, err)
					}
				}
				for f := ks.maxReleased.Load(); f < out.Token.Fence && !ks.maxReleased.CompareAndSwap(f, out.Token.Fence); {
					f = ks.maxReleased.Load()
				}
				ks.held.Add(-1)
				if rng.IntN(20) == 0 {
					e.DropOwner(clock.Load(), owner) // holds only this grant now
				} else if err := e.Release(clock.Load(), req.Key, out.Token); err != nil {
					fail("release %s: %v", k.name, err)
				}
				releases.Add(1)
				// A released token never releases twice.
				if err := e.Release(clock.Load(), req.Key, out.Token); err == nil {
					fail("second release of %s succeeded", k.name)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-clockDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if grants.Load() != releases.Load() || grants.Load() == 0 {
		t.Errorf("%d grants, %d releases", grants.Load(), releases.Load())
	}
	c, g := e.Metrics()
	if c.Grants != uint64(grants.Load()) || c.Releases+c.Dropped != uint64(releases.Load()) {
		t.Errorf("engine counted %d grants, %d releases + %d dropped; owners saw %d and %d",
			c.Grants, c.Releases, c.Dropped, grants.Load(), releases.Load())
	}
	if g.Held != 0 || g.Waiting != 0 {
		t.Errorf("left over: %+v", g)
	}
	if err := e.checkInvariants(); err != nil {
		t.Error(err)
	}
	t.Logf("%d grants, %d timeouts", grants.Load(), timeouts.Load())
}
