package engine

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
	"sync"
	"sync/atomic"
)

// A StateCapture is the engine's state at one moment, encoded shard by
// shard afterwards: a shard is encoded at the first change made to it
// after CaptureState (lockW), or by Finish, whichever comes first. So the
// engine goes on changing while a large state is encoded.
type StateCapture struct {
	e       *Engine
	counter uint64         // the fence counter
	sess    []byte         // the sessions' section
	parts   [][]byte       // per shard: appendStateLocked
	lapsed  [][]lapsedList // per shard: its lapsed two-phase grants
	delays  [][]byte       // per shard: appendDelaysLocked
	sets    []byte         // the waiting sets' section
}

// lapsedList is one owner's lapsed keys in a shard, sorted.
type lapsedList struct {
	owner OwnerID
	keys  []string
}

// CaptureState begins a capture of the state as it is now. Like
// WriteState it needs no mutating call to run meanwhile, but only for
// this short call (it encodes the sessions and marks the shards). One
// capture at a time: a shard an older capture still waits for is encoded
// for it first.
func (e *Engine) CaptureState() *StateCapture {
	c := e.newCapture()
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		s.settleLocked()
		s.capt = c
		s.mu.Unlock()
	}
	return c
}

// newCapture encodes the fence counter, the sessions and the waiting
// sets for a capture whose shards are still to be marked.
func (e *Engine) newCapture() *StateCapture {
	return &StateCapture{
		e:       e,
		counter: e.fence.Load(),
		sess:    e.sess.appendState(nil),
		sets:    e.sets.appendState(nil),
		parts:   make([][]byte, len(e.shards)),
		lapsed:  make([][]lapsedList, len(e.shards)),
		delays:  make([][]byte, len(e.shards)),
	}
}

// lockW locks s for a change: a capture still waiting for s encodes it
// first. Every change locks with lockW, or with mu and settleLocked
// before its first change (a call that visits every shard but changes
// few leaves the rest to the writer).
func (s *shard) lockW() {
	s.mu.Lock()
	s.settleLocked()
	s.watchLocked()
}

// settleLocked encodes s for a capture still waiting for it; under mu.
func (s *shard) settleLocked() {
	if s.capt != nil {
		s.capt.encodeLocked(s)
	}
}

// encodeLocked encodes s for c; under s.mu, with s.capt == c.
func (c *StateCapture) encodeLocked(s *shard) {
	c.parts[s.idx] = s.appendStateLocked(make([]byte, 0, 64*len(s.res)+256))
	c.lapsed[s.idx] = s.lapsedLocked()
	c.delays[s.idx] = s.appendDelaysLocked()
	s.capt = nil
}

// Finish encodes the shards no change has encoded yet, one at a time,
// and appends the whole state, as WriteState writes it, to b. It may run
// beside changes to the engine; call it once.
func (c *StateCapture) Finish(b []byte) []byte { return c.finish(b, 1) }

// finish is Finish on up to workers goroutines.
func (c *StateCapture) finish(b []byte, workers int) []byte {
	e := c.e
	encode := func(i int) {
		s := &e.shards[i]
		s.mu.Lock()
		if s.capt == c {
			c.encodeLocked(s)
		}
		s.mu.Unlock()
	}
	// The caller is one of the workers: Finish encodes on its goroutine.
	var next atomic.Int64
	run := func() {
		for i := int(next.Add(1) - 1); i < len(e.shards); i = int(next.Add(1) - 1) {
			encode(i)
		}
	}
	var wg sync.WaitGroup
	for range min(workers, len(e.shards)) - 1 {
		wg.Go(run)
	}
	run()
	wg.Wait()
	n, lists, version := 0, 0, c.version()
	for i, p := range c.parts {
		n += len(p) + len(c.delays[i])
		lists += len(c.lapsed[i])
		if c.delays[i] != nil {
			version = stateVersionDelays
		}
	}
	start := len(b)
	b = slices.Grow(b, n+len(c.sess)+4096)
	b = append(b, stateMagic...)
	b = append(b, version)
	b = binary.AppendUvarint(b, uint64(len(e.shards)))
	b = binary.AppendUvarint(b, c.counter)
	for _, p := range c.parts {
		b = append(b, p...)
	}
	b = append(b, c.sess...)
	b = appendLapsed(b, c.lapsed, lists)
	if version >= setsVersion {
		b = append(b, c.sets...)
	}
	if version >= stateVersionDelays {
		b = appendDelays(b, c.delays)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], crcTable))
}
