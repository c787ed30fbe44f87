package soak

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Grant is one slot a client was granted, in client-observed time (offsets
// from the History's epoch on the monotonic clock).
type Grant struct {
	Key   string
	Limit int
	Fence uint64
	Sent  time.Duration // the request that was granted (l, sl, e, se) left
	Recv  time.Duration // the grant arrived
	// End is the last instant the client can prove the slot was held;
	// meaningful only when Ended. See the package doc.
	End   time.Duration
	Ended bool
}

// Wait is one request answered by a deadline: l, sl, w, sw.
type Wait struct {
	Key     string
	Cmd     string
	Timeout time.Duration
	Sent    time.Duration
	Recv    time.Duration // when Result is "lost", when the client gave up
	Result  string        // granted, timeout, lost, or the unexpected answer
}

// Violation is one broken invariant.
type Violation struct {
	Check  string
	Detail string
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// History collects what the clients of a run observed. Safe for concurrent
// use.
type History struct {
	epoch time.Time

	mu     sync.Mutex
	grants []Grant
	waits  []Wait
	viol   []Violation
}

// NewHistory starts a history; its clock starts now.
func NewHistory() *History { return &History{epoch: time.Now()} }

// Now is the time since the epoch, on the monotonic clock.
func (h *History) Now() time.Duration { return time.Since(h.epoch) }

// At converts an offset back to a time.Time, for deadlines.
func (h *History) At(d time.Duration) time.Time { return h.epoch.Add(d) }

// AddGrant records a finished grant.
func (h *History) AddGrant(g Grant) {
	h.mu.Lock()
	h.grants = append(h.grants, g)
	h.mu.Unlock()
}

// AddWait records an answered (or lost) blocking request.
func (h *History) AddWait(w Wait) {
	h.mu.Lock()
	h.waits = append(h.waits, w)
	h.mu.Unlock()
}

// Violate records a violation a client saw directly.
func (h *History) Violate(check, format string, args ...any) {
	h.mu.Lock()
	h.viol = append(h.viol, Violation{check, fmt.Sprintf(format, args...)})
	h.mu.Unlock()
}

// Grants, Waits and Direct return copies of what was recorded.
func (h *History) Grants() []Grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.grants)
}

// Waits returns a copy of the recorded blocking requests.
func (h *History) Waits() []Wait {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.waits)
}

// Direct returns the violations the clients recorded as they ran.
func (h *History) Direct() []Violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.viol)
}

// CheckHolders reports every instant at which more than its limit of the
// proven holding intervals [Recv, End] overlap on a key. Intervals that
// only touch do not overlap: a release sent at t frees the slot after t,
// and the next grant arrives later still.
func CheckHolders(grants []Grant) (checked int, v []Violation) {
	type event struct {
		at    time.Duration
		delta int
		g     int
	}
	byKey := map[string][]event{}
	limits := map[string]int{}
	for i, g := range grants {
		if !g.Ended || g.End <= g.Recv {
			continue
		}
		checked++
		byKey[g.Key] = append(byKey[g.Key], event{g.Recv, +1, i}, event{g.End, -1, i})
		if l, ok := limits[g.Key]; !ok || g.Limit < l {
			limits[g.Key] = g.Limit
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ev := byKey[k]
		slices.SortFunc(ev, func(a, b event) int {
			if a.at != b.at {
				return cmpDur(a.at, b.at)
			}
			return a.delta - b.delta // ends before starts
		})
		active := map[int]bool{}
		for _, e := range ev {
			if e.delta < 0 {
				delete(active, e.g)
				continue
			}
			active[e.g] = true
			if len(active) > limits[k] {
				var fences []uint64
				for i := range active {
					fences = append(fences, grants[i].Fence)
				}
				slices.Sort(fences)
				v = append(v, Violation{"holders", fmt.Sprintf("key %q: %d holders at %v, limit %d (fences %v)",
					k, len(active), e.at, limits[k], fences)})
			}
		}
	}
	return checked, v
}

// CheckFences reports grants whose fence is not above that of every grant
// that arrived before their request was sent, and fence numbers issued
// twice. The fence counter is server-wide, so all keys are checked at once.
func CheckFences(grants []Grant) (checked int, v []Violation) {
	seen := make(map[uint64]int, len(grants))
	for i, g := range grants {
		if j, ok := seen[g.Fence]; ok {
			v = append(v, Violation{"fences", fmt.Sprintf("fence %d granted twice: key %q and key %q",
				g.Fence, grants[j].Key, g.Key)})
		}
		seen[g.Fence] = i
	}
	byRecv := slices.Clone(grants)
	slices.SortFunc(byRecv, func(a, b Grant) int { return cmpDur(a.Recv, b.Recv) })
	bySent := slices.Clone(grants)
	slices.SortFunc(bySent, func(a, b Grant) int { return cmpDur(a.Sent, b.Sent) })
	j, best := 0, -1
	for _, b := range bySent {
		for ; j < len(byRecv) && byRecv[j].Recv < b.Sent; j++ {
			if best < 0 || byRecv[j].Fence > byRecv[best].Fence {
				best = j
			}
		}
		checked++
		if best >= 0 && byRecv[best].Fence >= b.Fence {
			a := byRecv[best]
			v = append(v, Violation{"fences", fmt.Sprintf(
				"grant on %q (fence %d) arrived at %v, before the request for %q (fence %d) was sent at %v",
				a.Key, a.Fence, a.Recv, b.Key, b.Fence, b.Sent)})
		}
	}
	return checked, v
}

// CheckWaits reports blocking requests that were never answered, answered
// later than their timeout plus slack, or timed out before their timeout.
// It also returns the worst lateness past the timeout.
func CheckWaits(waits []Wait, slack time.Duration) (worst time.Duration, v []Violation) {
	for _, w := range waits {
		took := w.Recv - w.Sent
		switch {
		case w.Result == "lost":
			v = append(v, Violation{"answers", fmt.Sprintf("%s %q (timeout %v) sent at %v: no answer after %v",
				w.Cmd, w.Key, w.Timeout, w.Sent, took)})
			continue
		case w.Result != "granted" && w.Result != "timeout":
			v = append(v, Violation{"answers", fmt.Sprintf("%s %q: unexpected answer %q", w.Cmd, w.Key, w.Result)})
		case w.Result == "timeout" && took < w.Timeout:
			v = append(v, Violation{"answers", fmt.Sprintf("%s %q timed out after %v, before its timeout %v",
				w.Cmd, w.Key, took, w.Timeout)})
		}
		late := took - w.Timeout
		worst = max(worst, late)
		if late > slack {
			v = append(v, Violation{"answers", fmt.Sprintf("%s %q (timeout %v) answered %s after %v: %v past the timeout, slack %v",
				w.Cmd, w.Key, w.Timeout, w.Result, took, late, slack)})
		}
	}
	return worst, v
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
