package fencefile

import "time"

// Keep reserves ahead of use until stop is closed: every interval (see
// WithInterval) it compares last() (engine.LastFence) with Limit(), and
// when less than half a range is left it reserves another range and
// passes the new limit to raise (engine.RaiseFenceLimit). The engine's own
// FenceReserve path, an fsync under a shard lock, then runs only when
// grants outpace Keep. A failed reservation goes to onErr (if not nil);
// Keep carries on, and the engine panics if it ever runs out.
func (j *Journal) Keep(stop <-chan struct{}, last func() uint64, raise func(uint64), onErr func(error)) {
	tick := j.tick
	if tick == nil {
		t := time.NewTicker(j.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-stop:
			return
		case <-tick:
		}
		j.topUp(last, raise, onErr)
	}
}

// topUp is one Keep check.
func (j *Journal) topUp(last func() uint64, raise func(uint64), onErr func(error)) {
	lim := j.Limit()
	if last() <= lim-j.step/2 { // lim >= step always: every limit is base + step
		return
	}
	l, err := j.Reserve(lim + 1)
	if err != nil {
		if onErr != nil {
			onErr(err)
		}
		return
	}
	raise(l)
}
