package server

import (
	"slices"

	"github.com/panjf2000/gnet/v2"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/budget"
)

// Output bounds (Config): MaxConnOutput caps one connection's unsent
// answers, MaxOutput all connections' together, and WriteTimeout how long
// a connection may take none of them. Only a connection with unsent output
// updates the shared budget, once per turn.

// WithOutputBudget makes the server count its unsent output in b, which
// the REST server may share; without it the server makes its own budget
// of Config.MaxOutput bytes.
func WithOutputBudget(b *budget.Budget) Option {
	return func(s *Server) { s.budget = b }
}

// OutputBudget returns the budget the server counts its unsent output in.
func (s *Server) OutputBudget() *budget.Budget { return s.budget }

// bigBuf is the capacity past which a per-connection buffer is dropped
// after use rather than kept for the next turn, so that one large answer
// (stats) does not pin its size for the life of the connection.
const bigBuf = 64 << 10

// outChunk is the largest piece handed to gnet in one slice: gnet holds
// each slice, rounded up to a power of two, until all of it is sent, so in
// pieces the memory held stays close to the unsent bytes the budget counts.
const outChunk = 32 << 10

// write hands out to gnet, a large output in outChunk pieces. Event loop
// only.
func write(c gnet.Conn, out []byte) {
	if len(out) <= outChunk {
		_, _ = c.Write(out)
		return
	}
	_, _ = c.Writev(slices.Collect(slices.Chunk(out, outChunk))) // large answers only (stats)
}

// keep returns buf emptied for reuse, or nil when it grew large.
func keep(buf []byte) []byte {
	if cap(buf) > bigBuf {
		return nil
	}
	return buf[:0]
}

// settle updates ss's output accounting after a turn that handed wrote
// bytes to gnet, which now holds unsent bytes, and returns why the
// connection must close, or nil. Event loop only.
func (s *Server) settle(ss *session, wrote, unsent int) error {
	ss.queued += uint64(wrote)
	if unsent == 0 && ss.acct == 0 && !ss.stalled {
		return nil // the common case: everything went to the socket
	}
	if d := int64(unsent) - ss.acct; d != 0 {
		ss.acct = int64(unsent)
		ss.unsent.Store(ss.acct)
		if s.budget.Add(d) > s.budget.Max() && s.budget.Max() > 0 {
			s.kickEnforcer()
		}
	}
	if unsent == 0 {
		ss.stalled = false
		ss.stallSince.Store(0)
		ss.evict.Store(false)
		return nil
	}
	if unsent > s.cfg.MaxConnOutput {
		return errOutboundOverflow
	}
	if ss.evict.Load() {
		return errOutputBudget
	}
	t := now()
	// A stall starts when output is left unsent, and again each time
	// some of it has gone out since: the client reads, however slowly
	// (the caps above bound what a slow one holds). Only a client that
	// takes nothing for WriteTimeout is closed.
	if sent := ss.queued - uint64(unsent); !ss.stalled || sent > ss.stallMark {
		ss.stalled, ss.stallMark = true, sent
		ss.stallSince.Store(t)
		return nil
	}
	if wt := int64(s.cfg.WriteTimeout); wt > 0 && t-ss.stallSince.Load() > wt {
		return errWriteTimeout
	}
	return nil
}

// forget gives back what a closing session counted in the budget.
func (s *Server) forget(ss *session) {
	ss.mu.Lock()
	ss.gone = true
	n := len(ss.statsLine)
	ss.statsLine = nil
	ss.mu.Unlock()
	s.budget.Add(-int64(n) - ss.acct)
	ss.acct = 0
	ss.unsent.Store(0)
}

// kickEnforcer asks the sweeper to enforce the budget now.
func (s *Server) kickEnforcer() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// enforce marks and wakes the connections holding the most unsent output
// while the budget is over, down to three quarters of it: each one's loop
// closes it if it still holds output.
func (s *Server) enforce() {
	max := s.budget.Max()
	if max == 0 || s.budget.Used() <= max {
		return
	}
	need := s.budget.Used() - max*3/4
	type held struct {
		ss *session
		n  int64
	}
	var cands []held
	for ss := range s.sessions {
		if n := ss.unsent.Load(); n > 0 && !ss.evict.Load() {
			cands = append(cands, held{ss, n})
		}
	}
	slices.SortFunc(cands, func(a, b held) int { return int(b.n - a.n) })
	for _, c := range cands {
		if need <= 0 {
			break
		}
		c.ss.evict.Store(true)
		_ = c.ss.conn.Wake(nil) // fails only when the conn is gone
		need -= c.n
	}
}

// stats answers a stats request on its own goroutine and hands the line to
// the connection like a grant, within StatsConcurrency, MaxStatsBytes
// (totals only while the budget is spent) and MaxConnOutput (else the
// connection closes). consistent: the read barrier first (consistent.go).
func (s *Server) stats(ss *session, consistent bool) {
	if consistent {
		// Before a slot is taken: the barrier may wait on the leader.
		if line := s.readBarrier(); line != nil {
			s.deliverStats(ss, line)
			return
		}
	}
	s.statsSem <- struct{}{}
	defer func() { <-s.statsSem }()
	if ss.closed.Load() {
		return // checked again, under ss.mu, before the answer is kept
	}
	limit := s.cfg.MaxStatsBytes
	if !s.budget.Fits(int64(limit)) {
		limit = 1 // totals only
	}
	st := s.be.Engine().SnapshotMax(now(), limit)
	st.Connections = s.Connections()
	body, err := engine.EncodeStats(st, limit, s.be.ClusterStatus())
	var line []byte
	if err != nil {
		line = codec.AppendStatus(nil, codec.StatusError)
	} else {
		line = codec.AppendBody(make([]byte, 0, len(body)+8), codec.StatusOK, body)
	}
	s.deliverStats(ss, line)
}

// deliverStats hands a stats answer to its connection, or closes the
// connection when the answer would take it past MaxConnOutput.
func (s *Server) deliverStats(ss *session, line []byte) {
	ss.mu.Lock()
	if ss.gone {
		ss.mu.Unlock()
		return
	}
	over := ss.unsent.Load()+int64(len(line)) > int64(s.cfg.MaxConnOutput)
	if !over {
		ss.statsLine = line
		ss.delivered = true
		s.budget.Add(int64(len(line)))
	}
	ss.mu.Unlock()
	if over {
		s.protocolError(ss, errOutboundOverflow)
		_ = ss.conn.Close()
		return
	}
	ss.wake()
}

// takeStats appends the stats answer the connection waits for, if it came,
// and gives its bytes back to the budget: from here on they count as the
// transport's unsent output. Event loop only.
func (s *Server) takeStats(ss *session, out []byte) []byte {
	if !ss.statsWait || ss.parked {
		return out // not asked, or not answered yet (it unparks the session)
	}
	ss.mu.Lock()
	line := ss.statsLine
	ss.statsLine = nil
	ss.mu.Unlock()
	if line == nil {
		return out
	}
	ss.statsWait = false
	s.budget.Add(-int64(len(line)))
	return append(out, line...)
}
