package fence_test

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/latchd/latchd/fence"
)

func tok(f uint64) fence.Token { return fence.Token{Fence: f, Salt: 0x5a} }

func TestGuardCheck(t *testing.T) {
	tests := []struct {
		name     string
		seq      []uint64 // fences presented in order to resource "r"
		want     []error
		wantMark uint64
	}{
		{name: "rising", seq: []uint64{1, 2, 5}, want: []error{nil, nil, nil}, wantMark: 5},
		{name: "same holder again", seq: []uint64{3, 3}, want: []error{nil, nil}, wantMark: 3},
		{name: "zombie", seq: []uint64{34, 51, 34}, want: []error{nil, nil, fence.ErrStale}, wantMark: 51},
		{name: "zero token", seq: []uint64{0}, want: []error{fence.ErrBadToken}, wantMark: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g fence.Guard // the zero Guard is ready
			for i, f := range tt.seq {
				var tk fence.Token
				if f != 0 {
					tk = tok(f)
				}
				if err := g.Check("r", tk); !errors.Is(err, tt.want[i]) || (tt.want[i] == nil && err != nil) {
					t.Fatalf("Check #%d (fence %d) = %v, want %v", i, f, err, tt.want[i])
				}
			}
			if m := g.Mark("r"); m != tt.wantMark {
				t.Fatalf("Mark = %d, want %d", m, tt.wantMark)
			}
			if m := g.Mark("other"); m != 0 {
				t.Fatalf("another resource's mark = %d, want 0", m)
			}
		})
	}
}

func TestGuardWithMarkAndForget(t *testing.T) {
	g := fence.NewGuard(fence.WithMark("row:1", 100))
	if err := g.Check("row:1", tok(99)); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Check below the restored mark = %v, want ErrStale", err)
	}
	if err := g.Check("row:2", tok(99)); err != nil {
		t.Fatalf("Check on another resource = %v", err)
	}
	g.Forget("row:1")
	if err := g.Check("row:1", tok(99)); err != nil {
		t.Fatalf("Check after Forget = %v", err)
	}
}

func TestGuardDo(t *testing.T) {
	g := fence.NewGuard()
	ran := false
	if err := g.Do("r", tok(7), func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Do = %v, ran %v", err, ran)
	}
	boom := errors.New("boom")
	if err := g.Do("r", tok(8), func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	ran = false
	if err := g.Do("r", tok(7), func() error { ran = true; return nil }); !errors.Is(err, fence.ErrStale) || ran {
		t.Fatalf("stale Do = %v, ran %v; want ErrStale without running fn", err, ran)
	}
}

// TestGuardConcurrentWriters has many writers present rising-but-jittered
// fences (a new holder every few writes, zombies a few grants behind)
// through Do, and record each accepted write in order. Accepted fences must
// never decrease, and fn must never run twice at once (the unsynchronised
// counter is for the race detector).
func TestGuardConcurrentWriters(t *testing.T) {
	const writers, writes = 16, 400
	var (
		g        fence.Guard
		grants   atomic.Uint64
		mu       sync.Mutex
		accepted []uint64
		inside   int // touched only inside Do
		rejected atomic.Int64
		wg       sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range writes {
				f := grants.Add(1) + 8 - r.Uint64N(8) // up to 7 grants stale
				err := g.Do("row", tok(f), func() error {
					inside++
					runtime.Gosched() // a slow write: the window a check-then-write guard leaves open
					mu.Lock()
					accepted = append(accepted, f)
					mu.Unlock()
					return nil
				})
				switch {
				case errors.Is(err, fence.ErrStale):
					rejected.Add(1)
				case err != nil:
					t.Errorf("Do = %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if n := len(accepted) + int(rejected.Load()); n != writers*writes || inside != len(accepted) {
		t.Fatalf("%d accepted + %d rejected != %d writes (fn ran %d times)", len(accepted), rejected.Load(), writers*writes, inside)
	}
	if len(accepted) < writers*writes/10 || rejected.Load() == 0 {
		t.Fatalf("%d accepted, %d rejected: the test needs plenty of both", len(accepted), rejected.Load())
	}
	for i := 1; i < len(accepted); i++ {
		if accepted[i] < accepted[i-1] {
			t.Fatalf("write %d accepted fence %d after %d", i, accepted[i], accepted[i-1])
		}
	}
	if g.Mark("row") != accepted[len(accepted)-1] {
		t.Fatalf("mark %d, last accepted %d", g.Mark("row"), accepted[len(accepted)-1])
	}
}

// TestGuardConcurrentCheck races lock-free Checks: a Check that returns
// nil must never see a mark above its fence afterwards being lowered, and
// the final mark is the largest fence presented.
func TestGuardConcurrentCheck(t *testing.T) {
	const writers, checks = 16, 1000
	var g fence.Guard
	var wg sync.WaitGroup
	maxes := make([]uint64, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for range checks {
				f := 1 + r.Uint64N(1_000_000)
				maxes[w] = max(maxes[w], f)
				err := g.Check("row", tok(f))
				m := g.Mark("row")
				if err == nil && m < f {
					t.Errorf("Check(%d) accepted but mark is %d", f, m)
				}
				if errors.Is(err, fence.ErrStale) && m <= f {
					t.Errorf("Check(%d) rejected but mark is %d", f, m)
				}
			}
		}()
	}
	wg.Wait()
	var want uint64
	for _, m := range maxes {
		want = max(want, m)
	}
	if got := g.Mark("row"); got != want {
		t.Fatalf("final mark %d, want the largest fence %d", got, want)
	}
}
