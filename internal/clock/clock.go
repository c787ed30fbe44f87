// Package clock supplies the two inputs the engine takes from its callers:
// the time, as monotonic Unix nanoseconds that never step backwards, and
// token salts from a CSPRNG. It also runs the ticker that advances the
// engine's deadlines.
package clock

import (
	crand "crypto/rand"
	"math/rand/v2"
	"sync"
	"time"
)

// start pairs a wall-clock reading with Go's monotonic clock, so Now keeps
// moving forward at the real rate even if the wall clock is stepped.
var start = time.Now()

// Now returns the current time in Unix nanoseconds, measured on the
// monotonic clock from the process's start.
func Now() int64 { return start.UnixNano() + int64(time.Since(start)) }

var saltPool = sync.Pool{New: func() any {
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // crypto/rand.Read never returns an error (Go 1.24+)
	return rand.NewChaCha8(seed)
}}

// Salt returns 64 crypto-random bits for a token. Each generator in the
// pool is a ChaCha8 CSPRNG seeded from crypto/rand.
func Salt() uint64 {
	g := saltPool.Get().(*rand.ChaCha8)
	v := g.Uint64()
	saltPool.Put(g)
	return v
}

// Expirer is what Drive advances: engine.Engine satisfies it.
type Expirer interface{ Expire(now int64) }

// Drive calls e.Expire(Now()) every tick until stop is closed. A tick of
// 10 ms hands an expired lease on well within 50 ms.
func Drive(stop <-chan struct{}, e Expirer, tick time.Duration) {
	Every(stop, tick, func() { e.Expire(Now()) })
}

// Every calls f every d until stop is closed.
func Every(stop <-chan struct{}, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			f()
		}
	}
}
