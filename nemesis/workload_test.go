//go:build nemesis

package nemesis

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/internal/lincheck"
)

// resource is the shared thing the locks protect, as a fenced service
// would run it: every write passes fence.Guard. Leases outlast the run and
// nothing releases on disconnect, so a worker that was granted a key holds
// it until it releases it: a write the guard rejects as stale, or a second
// writer inside the key, means two clients held the lock at once.
type resource struct {
	g        fence.Guard
	mu       sync.Mutex
	occupant map[string]int      // key -> worker inside it
	accepted map[string][]uint64 // key -> fences accepted, in order
	writes   int
	bad      []anomaly
}

type anomaly struct {
	at   int64 // recorder time
	what string
}

func newResource() *resource {
	return &resource{occupant: map[string]int{}, accepted: map[string][]uint64{}}
}

// write is what worker does with key while it believes it holds it.
func (r *resource) write(at int64, key string, worker int, tok fence.Token) {
	err := r.g.Do(key, tok, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.writes++
		if w, ok := r.occupant[key]; ok && w != worker {
			r.bad = append(r.bad, anomaly{at, fmt.Sprintf("key %s: worker %d wrote with fence %d while worker %d was inside", key, worker, tok.Fence, w)})
		}
		r.occupant[key] = worker
		acc := r.accepted[key]
		if n := len(acc); n > 0 && tok.Fence <= acc[n-1] {
			r.bad = append(r.bad, anomaly{at, fmt.Sprintf("key %s: accepted fence %d after %d", key, tok.Fence, acc[n-1])})
		}
		r.accepted[key] = append(acc, tok.Fence)
		return nil
	})
	if errors.Is(err, fence.ErrStale) {
		r.mu.Lock()
		r.bad = append(r.bad, anomaly{at, fmt.Sprintf("key %s: worker %d holds fence %d, but the resource already accepted %d", key, worker, tok.Fence, r.g.Mark(key))})
		r.mu.Unlock()
	}
}

// leave is called before the worker sends its release.
func (r *resource) leave(key string, worker int) {
	r.mu.Lock()
	if r.occupant[key] == worker {
		delete(r.occupant, key)
	}
	r.mu.Unlock()
}

// timeline records when each operation was called and whether it was a
// grant, to count them per fault.
type timeline struct {
	mu     sync.Mutex
	calls  []int64
	grants []int64
}

func (tl *timeline) add(at int64, grant bool) {
	tl.mu.Lock()
	tl.calls = append(tl.calls, at)
	if grant {
		tl.grants = append(tl.grants, at)
	}
	tl.mu.Unlock()
}

// perSecond counts the grants to requests called in [from, to), per
// second from from.
func (tl *timeline) perSecond(from, to int64) []int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := make([]int, (to-from+int64(time.Second)-1)/int64(time.Second))
	for _, at := range tl.grants {
		if at >= from && at < to {
			n[(at-from)/int64(time.Second)]++
		}
	}
	return n
}

// hooks has worker id's lincheck.Worker rounds write to the resource
// between a grant and its release, and mark the timeline. off turns rec's
// times into the run's.
func hooks(id int, rec *lincheck.Recorder, off int64, res *resource, tl *timeline) lincheck.Hooks {
	return lincheck.Hooks{
		Done: func(call int64, granted bool) { tl.add(call+off, granted) },
		Granted: func(key, tok string) {
			if ft, err := fence.ParseString(tok); err == nil {
				res.write(rec.Now()+off, key, id, ft)
			}
		},
		Releasing: func(key string) { res.leave(key, id) },
	}
}
