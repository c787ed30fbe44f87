package replica

import (
	"time"

	"github.com/latchd/latchd/engine"
)

// batchHold is the leader's short wait, after it answers an entry's
// proposers, for those proposers' next commands, so that they leave in one
// entry with what queued meanwhile instead of alternating between two
// (docs/design/replication.md#batch-wait says why and how).
//
// It waits only for the owners it answered whose command kind makes a
// quick return likely (ret, learnt from past waits: a return raises its
// kind's chance, an absence lowers it, and an unlikely kind still rises a
// little at every answer), ends when they are all back or at its
// deadline (holdSpan times the average fill time, at most
// Config.BatchWait), and lets anyone else's commands queue behind it
// uncounted. A wait that holds commands has a timer to wake the raft
// loop; one that holds nothing ends at the next arrival or tick.
type batchHold struct {
	on     bool
	armed  bool                        // the timer is set for this wait's deadline
	expect int                         // owners expected back
	back   int                         // of those, back so far
	seen   int                         // queued commands already looked at (the queue only grows while a wait is on)
	owners map[engine.OwnerID]holdMark // the owners answered
	start  time.Time                   // when the wait began
	until  time.Time                   // its deadline
	ret    [holdKinds]float64          // per command kind: the chance its client is back within a wait
	fill   time.Duration               // moving average of how long waits take to fill (0: none yet)
	timer  *time.Timer
}

// holdMark is an answered owner: the kind of command it was answered
// for, whether it is expected back, whether it is back.
type holdMark struct {
	kind           Op
	expected, back bool
}

const (
	holdKinds  = int(OpCancelWait) + 1
	holdRise   = 0.125 // an owner back within a wait moves its kind's chance this much of the way to 1
	holdFall   = 0.25  // an owner not back moves it this much of the way to 0
	holdProbe  = 0.01  // an owner answered and not expected back raises its kind's chance by this
	holdLikely = 0.5   // a wait waits for the owners whose kind's chance is at least this
	// A wait's deadline is holdSpan times the average time waits take
	// to fill, at least holdMinWait and at most Config.BatchWait: the
	// clients that come straight back do so within about the same time
	// every entry, and one that has not come back in a few times that is
	// not coming (a timeout costs the queued commands the whole wait).
	holdSpan    = 4
	holdMinWait = 250 * time.Microsecond
	holdAvg     = 8 // the fill time's moving average weighs the newest wait 1/holdAvg
)

// answered is one client's command answerApplied is about to answer.
type answered struct {
	owner engine.OwnerID
	kind  Op
}

// answeredOwners lists the clients' commands answerApplied is about to
// answer (not the node's own Restamp and Expire).
func (n *Node) answeredOwners(dst []answered) []answered {
	for _, a := range n.answers {
		for _, p := range a.w.batch {
			if o := p.c.Client; o != 0 && !p.raw {
				dst = append(dst, answered{o, p.c.Op})
			}
		}
	}
	return dst
}

// startHold begins a wait for the owners about to be answered. It runs
// on the goroutine that applied the entry, before the answers go out (an
// owner answered first could come back before the wait exists and be
// proposed alone).
func (n *Node) startHold(ans []answered) {
	wait := n.cfg.BatchWait
	if wait <= 0 || len(ans) == 0 {
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
		// The first wait: every kind's client is expected back.
		for k := range h.ret {
			h.ret[k] = 1
		}
		h.owners = make(map[engine.OwnerID]holdMark)
		h.timer = time.AfterFunc(time.Hour, n.propQ.signal) // the raft loop proposes what waits
		h.timer.Stop()
	}
	clear(h.owners)
	expect := 0
	for _, a := range ans {
		k := int(a.kind) % holdKinds
		exp := h.ret[k] >= holdLikely
		if m, dup := h.owners[a.owner]; dup {
			exp = exp || m.expected // answered twice: expected if either command makes a return likely
		}
		if !exp {
			h.ret[k] = min(1, h.ret[k]+holdProbe)
		}
		h.owners[a.owner] = holdMark{kind: a.kind, expected: exp}
	}
	for _, m := range h.owners {
		if m.expected {
			expect++
		}
	}
	if expect == 0 {
		return
	}
	if h.fill > 0 {
		wait = min(wait, max(holdMinWait, holdSpan*h.fill))
	}
	n.setHold(true)
	h.expect, h.back = expect, 0
	h.seen = n.propQ.len()
	h.start = time.Now()
	h.until = h.start.Add(wait)
	// The timer only when the wait holds someone: arming it at every
	// wait slows a lone client (the runtime wakes its sleeping poller
	// for the earlier deadline), and a wait that holds nobody can end
	// when the next command arrives (judged by who came back before its
	// deadline).
	h.armed = h.seen > 0
	if h.armed {
		h.timer.Reset(wait)
	}
	n.holds.Add(1)
}

// setHold starts or ends a wait (under mu); the commit notices held
// while it is on go out once it is not (notice.go).
func (n *Node) setHold(on bool) {
	n.hold.on = on
	n.notices.holding.Store(on)
}

// holdOver reports whether the wait is over (it then ends it and learns
// from it): every owner expected back is, or the deadline passed. Under
// mu, with a wait on.
func (n *Node) holdOver() bool {
	h := &n.hold
	now := time.Now()
	late := !now.Before(h.until)
	if late {
		// Whatever is queued now came after the deadline as far as the
		// wait can tell (every arrival is looked at when it arrives).
		h.seen = n.propQ.len()
	}
	h.seen = n.propQ.scan(h.seen, func(p *proposal) {
		if o := p.c.Client; !p.raw {
			if o == 0 && p.c.Op == OpDisconnect {
				// A connection closed (the server's Disconnect names
				// it as Owner, through Propose): its last word, so
				// the wait stops expecting it.
				o = p.c.Owner
			}
			if m, ok := h.owners[o]; ok && !m.back {
				m.back = true
				h.owners[o] = m
				if m.expected {
					h.back++
				}
			}
		}
	})
	switch {
	case h.back >= h.expect:
		took := now.Sub(h.start)
		if h.fill == 0 {
			h.fill = took
		} else {
			h.fill += (took - h.fill) / holdAvg
		}
	case !late && !n.stopping():
		if !h.armed && h.seen > 0 {
			h.timer.Reset(h.until.Sub(now)) // it holds someone now
			h.armed = true
		}
		return false
	default:
		n.holdTimeouts.Add(1)
	}
	// Learn from every owner answered: back within the wait or not.
	for _, m := range h.owners {
		k := int(m.kind) % holdKinds
		if m.back {
			h.ret[k] += (1 - h.ret[k]) * holdRise
		} else if m.expected || h.back < h.expect {
			// Not back: counted against its kind when the wait was for
			// it, or ran to its deadline (everyone had the whole wait).
			h.ret[k] -= h.ret[k] * holdFall
		}
	}
	n.setHold(false)
	if h.armed {
		h.timer.Stop()
		h.armed = false
	}
	return true
}
