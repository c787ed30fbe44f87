package bench

import "github.com/latchd/latchd/codec"

// rwPick chooses, for ModeRW, whether each op of a worker reads or
// writes: a xorshift generator seeded by the worker, so a run's mix is
// the same every time and an op allocates nothing.
type rwPick struct {
	on        bool
	state     uint64
	threshold uint64 // a draw below it reads
}

func newRWPick(ratio float64, w int) rwPick {
	t := uint64(ratio * (1 << 53))
	return rwPick{on: true, state: uint64(w)*0x9e3779b97f4a7c15 | 1, threshold: t}
}

// read draws whether the next op reads.
func (p *rwPick) read() bool {
	p.state ^= p.state << 13
	p.state ^= p.state >> 7
	p.state ^= p.state << 17
	return p.state>>11 < p.threshold
}

// next sets d's acquire and release verbs for its next op.
func (p *rwPick) next(d *tcpDriver) {
	if !p.on {
		return
	}
	if p.read() {
		d.acquire, d.release = codec.CmdReadLock, codec.CmdReadRelease
	} else {
		d.acquire, d.release = codec.CmdWriteLock, codec.CmdWriteRelease
	}
}

// acquireURL returns the URL of d's next acquire: with ?mode= for ModeRW.
func (d *httpDriver) acquireURL() []byte {
	if !d.rw.on {
		return d.base
	}
	mode := "?mode=write"
	if d.rw.read() {
		mode = "?mode=read"
	}
	d.url = append(append(d.url[:0], d.base...), mode...)
	return d.url
}
