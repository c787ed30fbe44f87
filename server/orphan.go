package server

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// A connection may act for a session (the session request) instead of
// for itself: an engine session, as REST uses, whose idle TTL is
// Config.OrphanTTL. When the connection closes, its session goes idle, and
// what it holds and waits for is kept for the orphan TTL for a new
// connection (here, or on the next leader) that names the session to take
// back, queue places and tokens intact; then expiry drops it. Only a
// replicated backend offers sessions.
//
// A session id is 32 hex digits: the owner ID and the session's random
// key, which the engine keeps with the session (replicated), so any node
// can tell an id it never issued from a forged one.

// sessionCmd runs a session request. The backend calls take a log
// write each, so they run on their own goroutine while the connection is
// parked, as a stats request does; the answer comes back through answerLine.
// Event loop only.
func (s *Server) sessionCmd(ss *session, req *codec.Request, out []byte) ([]byte, bool) {
	if s.cfg.OrphanTTL <= 0 || !s.be.Replicated() {
		return codec.AppendStatus(out, codec.StatusError), false
	}
	if !s.be.IsLeader() {
		return appendNotLeader(out, s.be.LeaderAddrs().ClientAddr), false
	}
	closing := string(req.Arg) == codec.SessionClose
	if cur := ss.sess.Load(); cur != 0 && !closing {
		return s.keepalive(ss, req.Key, engine.OwnerID(cur), out)
	}
	if !closing && ss.used {
		// Only a connection's first request may name its owner.
		return codec.AppendStatus(out, codec.StatusError), false
	}
	owner, key, ok := parseSessionID(req.Key)
	fresh := string(req.Key) == codec.SessionNew
	if !ok && (!fresh || closing) {
		return codec.AppendStatus(out, codec.StatusError), false
	}
	if fresh {
		owner, key = ss.id, newSessionKey()
	}
	ss.parked, ss.used = true, true
	ss.inflight.Add(1)
	s.inflight.Add(1)
	go s.runSession(ss, owner, key, fresh, closing)
	return out, false
}

// keepalive answers a session request naming the session ss already acts
// for: at once when the session is busy (the client's check that its
// connection still works), or, when a new leader's restamp made it idle
// (engine.IdleSessions: this node led before and leads again), after
// beginning it anew. Event loop only.
func (s *Server) keepalive(ss *session, id []byte, cur engine.OwnerID, out []byte) ([]byte, bool) {
	owner, key, ok := parseSessionID(id)
	eng := s.be.Engine()
	k, exists := eng.SessionKey(owner)
	if !ok || owner != cur || !exists || k != key {
		return codec.AppendStatus(out, codec.StatusError), false
	}
	if busy, _ := eng.SessionBusy(owner); busy > 0 {
		return s.appendSessionOK(out, owner, key), false
	}
	ss.parked = true
	ss.inflight.Add(1)
	s.inflight.Add(1)
	go s.runSession(ss, owner, key, false, false)
	return out, false
}

// runSession opens, attaches or closes the session and answers. Its own
// goroutine.
func (s *Server) runSession(ss *session, owner engine.OwnerID, key uint64, fresh, closing bool) {
	defer s.inflight.Add(-1)
	defer s.answered1(ss)
	line := codec.AppendStatus(nil, codec.StatusError)
	var err error
	switch {
	case closing:
		var rep backend.Reply
		if k, ok := s.be.Engine().SessionKey(owner); ok && k == key {
			rep, err = s.be.Do(backend.Request{Op: backend.OpCloseSession, Owner: owner}, nil)
		}
		if err == nil && rep.OK {
			ss.sess.CompareAndSwap(uint64(owner), 0)
			line = codec.AppendStatus(nil, codec.StatusOK)
		}
	case fresh:
		_, err = s.be.Do(backend.Request{Op: backend.OpOpenSession, Owner: owner, TTL: s.cfg.OrphanTTL,
			SessionKey: key}, nil)
		if err == nil {
			line, err = s.beginSession(ss, owner, key)
		}
	default:
		if k, ok := s.be.Engine().SessionKey(owner); ok && k == key {
			line, err = s.beginSession(ss, owner, key)
		}
	}
	if addr, ok := notLeader(err); ok {
		line = appendNotLeader(nil, addr)
	} else if err != nil {
		s.debug("session request failed", zap.Uint64("conn_id", uint64(ss.id)), zap.Error(err))
	}
	ss.answerLine(line)
}

// beginSession makes ss act for owner's session, busy while ss is open, and
// returns the answer: "ok <session id> <orphan TTL in seconds>".
func (s *Server) beginSession(ss *session, owner engine.OwnerID, key uint64) ([]byte, error) {
	rep, err := s.be.Do(backend.Request{Op: backend.OpBeginSession, Owner: owner}, nil)
	if err != nil || !rep.OK {
		return codec.AppendStatus(nil, codec.StatusError), err
	}
	// Before answered1: a close meanwhile waits for it to disconnect.
	ss.sess.Store(uint64(owner))
	return s.appendSessionOK(nil, owner, key), nil
}

// appendSessionOK appends "ok <session id> <orphan TTL in seconds>".
func (s *Server) appendSessionOK(out []byte, owner engine.OwnerID, key uint64) []byte {
	var id [32]byte
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], uint64(owner))
	binary.BigEndian.PutUint64(raw[8:], key)
	hex.Encode(id[:], raw[:])
	return codec.AppendGrant(out, codec.StatusOK, id[:], int64((s.cfg.OrphanTTL+time.Second-1)/time.Second))
}

// answerLine hands a late answer to ss, as answer does.
func (ss *session) answerLine(line []byte) {
	if ss.directLine(line) {
		return
	}
	ss.mu.Lock()
	ss.inbox = append(ss.inbox, line...)
	ss.delivered = true
	ss.mu.Unlock()
	ss.wake()
}

// parseSessionID returns the owner and key a session id names.
func parseSessionID(id []byte) (engine.OwnerID, uint64, bool) {
	var raw [16]byte
	if len(id) != 32 {
		return 0, 0, false
	}
	if _, err := hex.Decode(raw[:], id); err != nil {
		return 0, 0, false
	}
	owner, key := binary.BigEndian.Uint64(raw[:8]), binary.BigEndian.Uint64(raw[8:])
	return engine.OwnerID(owner), key, owner != 0 && key != 0
}

// newSessionKey returns a random non-zero session key.
func newSessionKey() uint64 {
	for {
		var raw [8]byte
		_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails (Go 1.24+)
		if k := binary.BigEndian.Uint64(raw[:]); k != 0 {
			return k
		}
	}
}
