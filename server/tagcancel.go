package server

import (
	"hash/maphash"
	"sync"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
)

// Withdrawing a parked request in tagged mode (codec/cancel.go):
// "#<tag> cancel[ <session-id>]" / <key> / (empty, or "set") runs the
// engine's CancelWait (CancelSet) for the owner it names, as REST does for
// a client that went away. The request withdrawn hears Canceled, which
// from a disconnect or a restore closes its connection (tagCanceled): so
// the cancel leaves a mark before it is submitted, and the sink that
// finds it answers its own request "#<tag> timeout" and stays open. Marks
// live on the Server, not the connection: a session's request may have
// parked on another connection it is attached to.

// cancelMark is a cancel request in flight: the owner, and the key (a
// set's first) whose wait it withdraws.
type cancelMark struct {
	id    uint64
	owner engine.OwnerID
	key   uint64 // keyHash
	set   bool
}

// cancelMarks are the cancel requests in flight.
type cancelMarks struct {
	mu    sync.Mutex
	next  uint64
	marks []cancelMark
}

// add leaves a mark and returns its id.
func (m *cancelMarks) add(owner engine.OwnerID, key uint64, set bool) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	m.marks = append(m.marks, cancelMark{id: m.next, owner: owner, key: key, set: set})
	return m.next
}

// drop removes the mark id, if no sink took it.
func (m *cancelMarks) drop(id uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.marks {
		if m.marks[i].id == id {
			m.marks = append(m.marks[:i], m.marks[i+1:]...)
			return
		}
	}
}

// take removes a mark for the request of owner on key, and reports
// whether there was one: the request's Canceled is a cancel's.
func (m *cancelMarks) take(owner engine.OwnerID, key uint64, set bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range m.marks {
		if k.owner == owner && k.key == key && k.set == set {
			m.marks = append(m.marks[:i], m.marks[i+1:]...)
			return true
		}
	}
	return false
}

// keySeed seeds keyHash.
var keySeed = maphash.MakeSeed()

// keyHash is what a parked request keeps of its key (a set's first), for
// a cancel's mark to find it.
func keyHash(key []byte) uint64 { return maphash.Bytes(keySeed, key) }

// tagCancel runs a tagged cancel request for owner. Event loop only.
func (s *Server) tagCancel(ss *session, t int64, tr *codec.Tagged, owner engine.OwnerID, out []byte) []byte {
	set := string(tr.Arg) == codec.CancelSet
	op := backend.OpCancelWait
	if set {
		op = backend.OpCancelSet
	}
	id := s.cancels.add(owner, keyHash(tr.Key), set)
	var later backend.Later
	if s.be.Replicated() {
		a := &cancelAnswer{ss: ss, id: id}
		a.tag.set(tr.Tag)
		later = a
	}
	r := &ss.req
	*r = backend.Request{Op: op, Key: tr.Key, Owner: owner, Client: ss.id, Now: t}
	rep, pending, err := s.be.Submit(r, nil, ss.via(), later)
	*r = backend.Request{} // views of the read buffer
	if pending {
		ss.used = true
		ss.inflight.Add(1)
		s.inflight.Add(1)
		return out
	}
	s.cancels.drop(id)
	if err != nil {
		ss.noteRedirect(err)
	}
	return appendCancel(codec.AppendTag(out, tr.Tag), rep, err)
}

// appendCancel appends a cancel's answer: ok when it withdrew a request,
// error_not_enqueued when none waited, else the error's.
func appendCancel(out []byte, rep backend.Reply, err error) []byte {
	switch {
	case err != nil:
		out, _, _ = appendErr(out, codec.CmdCancel, err, false)
		return out
	case rep.OK:
		return codec.AppendStatus(out, codec.StatusOK)
	}
	return codec.AppendStatus(out, codec.StatusErrorNotEnqueued)
}

// cancelAnswer is the Later of a cancel on a replicated backend.
type cancelAnswer struct {
	ss  *session
	tag tagBuf
	id  uint64
}

// Answer implements backend.Later.
func (a *cancelAnswer) Answer(rep backend.Reply, err error) {
	ss := a.ss
	s := ss.srv
	defer s.inflight.Add(-1)
	defer s.answered1(ss)
	s.cancels.drop(a.id)
	if err != nil {
		ss.noteRedirect(err)
	}
	ss.tagLine(appendCancel(codec.AppendTag(nil, a.tag.bytes()), rep, err))
}
