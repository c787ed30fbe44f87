package fencefile

import "time"

// Keep reserves ahead of use until stop is closed: every interval (see
// WithInterval), when less than half a range is left above last()
// (engine.LastFence), it reserves another range and passes the new limit
// to raise (engine.RaiseFenceLimit). A failed reservation goes to onErr
// (if not nil) and Keep carries on.
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
