package fence

import (
	"errors"
	"sync"
	"sync/atomic"
)

// Guard errors.
var (
	// ErrStale reports a token older than the newest one the resource has
	// accepted: its holder's lease has ended and someone else holds the
	// lock now.
	ErrStale = errors.New("fence: stale token")
	// ErrNoToken reports a request that carries no token.
	ErrNoToken = errors.New("fence: missing token")
)

// Guard keeps, for each named resource, the high-water mark of the fence
// numbers it has accepted, and rejects a token below it. It is what a
// protected resource runs so that a lock holder that paused past its lease
// (a zombie) cannot write after its successor.
//
// Design. Each resource has one atomic mark, advanced by compare-and-swap:
// Check accepts a fence >= the mark (equal is the same holder writing
// again) and raises the mark to it, without taking a lock. But a check
// followed by a separate write is two steps: A (fence 5) checks, B (fence
// 6) checks and writes, then A writes over B. Do closes that gap with a
// per-resource mutex held across check, mark advance and the write, so
// writes under Do happen in fence order. Check alone is right only when the
// write itself is conditional on the fence (a SQL "WHERE fence < $1"), or
// the caller serialises writes some other way.
//
// The zero Guard is ready to use. A Guard is safe for concurrent use and
// must not be copied after first use. Marks live in memory, one per
// resource name, until Forget: a resource that restarts must restore its
// mark (WithMark) from wherever it stores the fence of its last write.
type Guard struct {
	marks sync.Map // resource name -> *mark
}

type mark struct {
	v  atomic.Uint64 // the highest fence accepted
	mu sync.Mutex    // serialises Do on this resource
}

// GuardOption configures NewGuard.
type GuardOption func(*Guard)

// WithMark starts resource's mark at fence, e.g. the fence stored with the
// resource's last write, so tokens older than that are rejected after a
// restart.
func WithMark(resource string, fence uint64) GuardOption {
	return func(g *Guard) { g.mark(resource).raise(fence) }
}

// NewGuard returns a Guard with opts applied.
func NewGuard(opts ...GuardOption) *Guard {
	g := new(Guard)
	for _, o := range opts {
		o(g)
	}
	return g
}

func (g *Guard) mark(resource string) *mark {
	if m, ok := g.marks.Load(resource); ok {
		return m.(*mark)
	}
	m, _ := g.marks.LoadOrStore(resource, new(mark))
	return m.(*mark)
}

// raise accepts f if it is >= the mark and raises the mark to f. It never
// blocks: a failed compare-and-swap means another token moved the mark, so
// it reloads and decides again.
func (m *mark) raise(f uint64) error {
	for {
		cur := m.v.Load()
		if f < cur {
			return ErrStale
		}
		if f == cur || m.v.CompareAndSwap(cur, f) {
			return nil
		}
	}
}

// Check accepts tok for resource if its fence is at least the highest
// accepted so far, and raises the mark to it; otherwise it returns
// ErrStale. The zero Token, never issued, is ErrBadToken. Check does not
// wait for a Do in progress; see the Guard doc for when Check is enough.
func (g *Guard) Check(resource string, tok Token) error {
	if tok.IsZero() {
		return ErrBadToken
	}
	return g.mark(resource).raise(tok.Fence)
}

// Do runs fn if tok is not stale for resource, holding the resource's
// mutex from the check until fn returns, so no other Do on the resource
// (older or newer) interleaves with fn. The mark is raised before fn runs
// and stays raised even if fn fails: the token has been seen. Do returns
// ErrStale or ErrBadToken without running fn, else fn's error.
func (g *Guard) Do(resource string, tok Token, fn func() error) error {
	if tok.IsZero() {
		return ErrBadToken
	}
	m := g.mark(resource)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.raise(tok.Fence); err != nil {
		return err
	}
	return fn()
}

// Mark returns the highest fence accepted for resource, 0 if none.
func (g *Guard) Mark(resource string) uint64 {
	if m, ok := g.marks.Load(resource); ok {
		return m.(*mark).v.Load()
	}
	return 0
}

// Forget drops resource's mark, so its memory can be reclaimed. Only safe
// when no holder of an old token can still write, e.g. the resource was
// deleted.
func (g *Guard) Forget(resource string) { g.marks.Delete(resource) }

// Header is the HTTP header that carries a fencing token (see packages
// fence/fencehttp and fence/fencefast).
const Header = "X-Fencing-Token"
