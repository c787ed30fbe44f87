//go:build !hashicorpraft

package replica

import "time"

// batchHold is the leader's short wait, after it answers an entry's
// proposers, for those proposers' next commands: they then leave in one
// entry with the commands that queued while the entry was in flight,
// instead of in the entry after that.
//
// Why: with one entry in flight (maxInflightEntries), a command that
// arrives while an entry is out waits for that entry and then for its
// own, and a busy leader's entries alternate between two halves of its
// clients. Waiting for the clients just answered (a loopback round trip
// of tens of microseconds, against a commit's fdatasync of hundreds) puts
// them all in the next entry: one commit per command instead of two, and
// the fixed cost of a commit (three fsyncs, the messages, the wake-ups)
// shared by twice the commands. bench/cluster.sh on the 2-core VM,
// docs/cluster.md "Batch wait", has the before and after.
//
// The wait ends as soon as the queue holds what was queued plus the
// share of the answered proposers expected back, or at the deadline
// (Config.BatchWait). The share is learnt: a wait that reaches its
// count raises it, a wait that times out lowers it toward the share
// that did come back, so clients that think between commands (a lock
// held while a job runs) soon stop being waited for; a share too low to
// expect anyone back still rises a little at every entry, so a workload
// that changes is tried again. A wait may begin with nothing queued: it
// holds what arrives until the count or the deadline, and ends at its
// deadline even if nothing arrived (the timer's wake), so that it is
// judged by what came back within it, not by the next command, however
// late.
type batchHold struct {
	on       bool
	want     int       // propose once this many commands are queued
	base     int       // queued when the wait began
	answered int       // proposers answered when the wait began
	until    time.Time // the wait's deadline
	ret      float64   // expected share of answered proposers back within the wait
	timer    *time.Timer
}

const (
	holdRise  = 0.125 // a wait that met its count moves ret this much of the way to 1
	holdFall  = 0.25  // a wait that timed out moves ret this much of the way to the share seen
	holdProbe = 0.02  // an entry without a wait (ret too low) raises ret by this
)

// startHold begins a wait after answering answered proposers. It runs on
// the goroutine that applied the entry, before the answers go out (a
// proposer answered first could come back before the wait exists and be
// proposed alone).
func (n *Node) startHold(answered int) {
	wait := n.cfg.BatchWait
	if wait <= 0 || answered <= 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.isLeaderState() {
		// Lost the lead since the entry applied: leadershipLost has
		// run and would not end this wait.
		return
	}
	h := &n.hold
	if h.timer == nil {
		// The first wait: ret starts at 1 (every proposer comes back).
		h.ret = 1
		h.timer = time.AfterFunc(time.Hour, func() {
			select {
			case n.propQ.wake <- struct{}{}: // the raft loop proposes what waits
			default:
			}
		})
		h.timer.Stop()
	}
	expect := int(float64(answered)*h.ret + 0.5)
	if expect < 1 {
		h.ret = min(1, h.ret+holdProbe)
		return
	}
	q := n.propQ.len()
	h.on, h.base, h.answered = true, q, answered
	h.want = min(q+expect, maxBatch)
	h.until = time.Now().Add(wait)
	h.timer.Reset(wait)
	n.holds.Add(1)
}

// holdOver reports whether the wait is over with queued commands queued
// (it then ends it and learns from it). Under mu, with a wait on.
func (n *Node) holdOver(queued int) bool {
	h := &n.hold
	switch {
	case queued >= h.want:
		h.ret += (1 - h.ret) * holdRise
	case time.Now().Before(h.until) && !n.stopping():
		return false
	default:
		n.holdTimeouts.Add(1)
		back := float64(max(queued-h.base, 0)) / float64(h.answered)
		h.ret += (min(back, 1) - h.ret) * holdFall
	}
	h.on = false
	h.timer.Stop()
	return true
}
