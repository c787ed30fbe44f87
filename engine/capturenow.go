package engine

// CaptureStateNow is CaptureState for an engine that other goroutines
// go on changing, such as a single node's: it holds every shard's lock at
// once while it marks them, so the capture is the state at one moment,
// between two changes, even across shards. A call that visits the shards
// one at a time (Disconnect, Expire) may be captured part done, as it
// would be seen by a request made at that moment.
func (e *Engine) CaptureStateNow() *StateCapture {
	for i := range e.shards {
		e.shards[i].mu.Lock()
	}
	// No grant runs while every shard is locked: the counter and the
	// sessions (whose lock is never held while a shard's is taken) are
	// those of the same moment.
	c := e.newCapture()
	for i := range e.shards {
		s := &e.shards[i]
		s.settleLocked()
		s.capt = c
		s.mu.Unlock()
	}
	return c
}
