package server

import (
	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// Sessions in tagged mode. The session request of a tagged connection
// attaches a session to the connection instead of making the connection
// act for it: one connection carries any number of sessions, and each
// tagged request names the one it acts for on its command line. They are
// the same engine sessions as the plain session request's (orphan.go) and
// REST's: the connection keeps each attached session busy, and when it
// closes each goes idle for the orphan TTL, for another connection to
// attach. Unlike the plain request, tagged sessions work on a single node
// too (with --orphan-ttl above 0): a client that reconnects finds them.

// tagSession runs a tagged session request: open, attach (a keepalive
// when attached already) or close. Event loop only.
func (s *Server) tagSession(ss *session, tr *codec.Tagged, out []byte) []byte {
	tagged := codec.AppendTag(out, tr.Tag)
	if s.cfg.OrphanTTL <= 0 {
		return codec.AppendStatus(tagged, codec.StatusError)
	}
	if s.be.Replicated() && !s.be.IsLeader() {
		return appendNotLeader(tagged, s.be.LeaderAddrs().ClientAddr)
	}
	closing := string(tr.Arg) == codec.SessionClose
	fresh := string(tr.Key) == codec.SessionNew
	owner, key, ok := parseSessionID(tr.Key)
	if !ok && (!fresh || closing) {
		return codec.AppendStatus(tagged, codec.StatusError)
	}
	if ok && !closing && ss.tagAttached(owner, key) {
		if busy, _ := s.be.Engine().SessionBusy(owner); busy > 0 {
			return s.appendSessionOK(tagged, owner, key) // a keepalive
		}
	}
	if fresh {
		owner, key = engine.OwnerID(s.nextID.Add(1)), newSessionKey()
	}
	var tag tagBuf
	tag.set(tr.Tag)
	ss.used = true // its close must end the sessions it attached
	ss.inflight.Add(1)
	s.inflight.Add(1)
	go s.runTagSession(ss, tag, owner, key, fresh, closing)
	return out
}

// runTagSession opens, attaches or closes the session and answers. Its own
// goroutine: on a replicated backend each step is a log write.
func (s *Server) runTagSession(ss *session, tag tagBuf, owner engine.OwnerID, key uint64, fresh, closing bool) {
	defer s.inflight.Add(-1)
	defer s.answered1(ss) // after the attach: a close meanwhile ends it
	line := codec.AppendTag(nil, tag.bytes())
	mark := len(line)
	ok := false
	var err error
	k, found := s.be.Engine().SessionKey(owner)
	switch {
	case closing:
		var rep backend.Reply
		if found && k == key {
			rep, err = s.be.Do(backend.Request{Op: backend.OpCloseSession, Owner: owner}, nil)
		}
		if ok = err == nil && rep.OK; ok {
			ss.tagDetach(owner)
		}
	case fresh:
		_, err = s.be.Do(backend.Request{Op: backend.OpOpenSession, Owner: owner, TTL: s.cfg.OrphanTTL,
			SessionKey: key}, nil)
		if err == nil {
			ok, err = s.tagBegin(ss, owner, key)
		}
	case found && k == key:
		ok, err = s.tagBegin(ss, owner, key)
	}
	addr, redirect := notLeader(err)
	switch {
	case redirect:
		line = appendNotLeader(line[:mark], addr)
	case ok && closing:
		line = codec.AppendStatus(line, codec.StatusOK)
	case ok:
		line = s.appendSessionOK(line, owner, key)
	default:
		line = codec.AppendStatus(line, codec.StatusError)
	}
	ss.tagLine(line)
}

// tagBegin makes owner's session busy while ss is open and attaches it.
func (s *Server) tagBegin(ss *session, owner engine.OwnerID, key uint64) (bool, error) {
	rep, err := s.be.Do(backend.Request{Op: backend.OpBeginSession, Owner: owner}, nil)
	if err != nil || !rep.OK {
		return false, err
	}
	ss.mu.Lock()
	found := false
	for _, a := range ss.tg.attached {
		found = found || a.owner == owner
	}
	if !found {
		ss.tg.attached = append(ss.tg.attached, tagSess{owner: owner, key: key})
		ss.mu.Unlock()
		return true, nil
	}
	ss.mu.Unlock()
	// Attached already: a keepalive that began the session anew (a new
	// leader's restamp had made it idle). The close ends it once.
	return true, nil
}

// tagAttached reports whether the session is attached to ss.
func (ss *session) tagAttached(owner engine.OwnerID, key uint64) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, a := range ss.tg.attached {
		if a.owner == owner && a.key == key {
			return true
		}
	}
	return false
}

// tagDetach forgets an attached session (it was closed).
func (ss *session) tagDetach(owner engine.OwnerID) {
	ss.mu.Lock()
	for i, a := range ss.tg.attached {
		if a.owner == owner {
			ss.tg.attached = append(ss.tg.attached[:i], ss.tg.attached[i+1:]...)
			break
		}
	}
	ss.mu.Unlock()
}

// tagOwner returns the owner a tagged request acts for: the attached
// session its session field names, or without one the connection's owner.
func (ss *session) tagOwner(field []byte) (engine.OwnerID, bool) {
	if field == nil {
		if o := ss.sess.Load(); o != 0 {
			return engine.OwnerID(o), true
		}
		return ss.id, true
	}
	owner, key, ok := parseSessionID(field)
	return owner, ok && ss.tagAttached(owner, key)
}

// endTagSessions ends the connection's hold on every attached session:
// each goes idle for the orphan TTL unless another connection has it.
func (s *Server) endTagSessions(ss *session) {
	ss.mu.Lock()
	attached := ss.tg.attached
	ss.tg.attached = nil
	ss.mu.Unlock()
	for _, a := range attached {
		s.be.EndSessionAsync(a.owner)
	}
}
