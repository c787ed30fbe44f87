package replica

import (
	"context"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The apply thread takes committed entries to the FSM, their answers to
// the proposers, configuration changes to the member book; a goroutine
// that just stepped raft may do it inline (kickApply).

// applyBatch applies committed entries in order and answers their
// proposers; a MsgSnap from the append thread is a snapshot to restore.
// Under applyRun.
func (n *Node) applyBatch(ms []*raftpb.Message) {
	for _, m := range ms {
		if m == nil { // snapshotNow's marker (tests)
			if ch := n.forceSnap.Swap(nil); ch != nil {
				n.maybeSnapshot(true)
				close(*ch)
			}
			continue
		}
		if m.GetType() == raftpb.MessageType_MsgSnap { // from installSnapshot, not raft
			err := n.restoreSnapshot(m.GetSnapshot())
			if err == nil {
				n.snapIndex = m.GetSnapshot().GetMetadata().GetIndex()
				n.snapBytes.Store(uint64(len(m.GetSnapshot().GetData())))
				n.logBytes = 0
			}
			n.restored <- err
			continue
		}
		for _, e := range m.GetEntries() {
			n.logBytes += uint64(len(e.GetData()))
			n.applyOne(e)
		}
		// The answers first, then raft (which proposes what queued
		// meanwhile): the other order is slower for a lone client.
		// The batch wait starts before the answers leave (batchwait.go).
		n.ownerBuf = n.answeredOwners(n.ownerBuf[:0])
		n.startHold(n.ownerBuf)
		n.answerApplied()
		n.applied()
		n.step(m.GetResponses()...)
	}
	n.readsApplied()
}

// applied counts an apply done (notice.go) and sends the commit notices
// held for it if no batch wait began.
func (n *Node) applied() {
	n.notices.applying.Add(-1)
	n.sendAll(nil)
}

// SetAnswerRunner has r run the answers to applied entries' ProposeFunc
// callbacks instead of the goroutine that applied them (nil: that
// goroutine); Propose's answers stay there. It reports true.
func (n *Node) SetAnswerRunner(r AnswerRunner) bool {
	if r == nil {
		n.answerRun.Store(nil)
		return true
	}
	n.answerRun.Store(&r)
	return true
}

// answerApplied answers the proposers of the entries just applied; with
// an AnswerRunner, it hands it the callbacks' answers, in log order.
func (n *Node) answerApplied() {
	if len(n.answers) == 0 {
		return
	}
	r := n.answerRun.Load()
	var later []laterAnswer
	to := &later
	if r == nil {
		to = nil // the callbacks run now
	}
	for i, a := range n.answers {
		n.finishTo(a.w, a.res, nil, to)
		n.answers[i] = pendingAnswer{}
	}
	n.answers = n.answers[:0]
	if len(later) == 0 {
		return
	}
	fn := func() {
		for _, l := range later {
			l.p.answer(l.r, nil)
		}
	}
	if !(*r)(len(later), fn) {
		fn()
	}
}

func (n *Node) applyOne(e *raftpb.Entry) {
	idx := e.GetIndex()
	if idx <= n.fsm.AppliedIndex() {
		return // in the snapshot this node restored
	}
	switch e.GetType() {
	case raftpb.EntryType_EntryNormal:
		data := e.GetData()
		if len(data) == 0 {
			n.fsm.skipEntry(idx)
			return
		}
		n.applyMu.Lock()
		res := n.fsm.applyEntry(idx, data)
		n.applyMu.Unlock()
		origin, key := firstReqID(data)
		if origin != n.origin {
			return
		}
		n.waitMu.Lock()
		w := n.waiters[key]
		delete(n.waiters, key)
		n.waitMu.Unlock()
		if w != nil {
			n.answers = append(n.answers, pendingAnswer{w: w, res: res})
		}
	case raftpb.EntryType_EntryConfChange, raftpb.EntryType_EntryConfChangeV2:
		n.applyConfChange(e)
	default:
		n.fsm.skipEntry(idx)
	}
}

// decodeConfChange returns a configuration change entry's change and its
// context; false when the entry does not decode.
func decodeConfChange(e *raftpb.Entry) (raftpb.ConfChangeI, []byte, bool) {
	if e.GetType() == raftpb.EntryType_EntryConfChange {
		c := &raftpb.ConfChange{}
		err := proto.Unmarshal(e.GetData(), c)
		return c, c.GetContext(), err == nil
	}
	c := &raftpb.ConfChangeV2{}
	err := proto.Unmarshal(e.GetData(), c)
	return c, c.GetContext(), err == nil
}

// applyConfChange applies a configuration change entry: the member it
// names goes in the book, raft takes the change, and the proposer, if it
// waits here, hears it applied.
func (n *Node) applyConfChange(e *raftpb.Entry) {
	idx := e.GetIndex()
	cc, ctxb, ok := decodeConfChange(e)
	if !ok {
		n.fsm.skipEntry(idx)
		return
	}
	d := decoder{b: ctxb}
	req := d.uvarint()
	name, addr := string(d.bytes()), string(d.bytes())
	v2 := cc.AsV2()
	if !d.bad && name != "" {
		for _, ch := range v2.GetChanges() {
			if ch.GetNodeId() == raftID(name) && ch.GetType() != raftpb.ConfChangeType_ConfChangeRemoveNode {
				n.bookMu.Lock()
				n.book[raftID(name)] = Member{ID: name, RaftAddr: addr, Suffrage: "nonvoter"}
				n.bookMu.Unlock()
				if raftID(name) != n.id {
					n.tr.setPeer(raftID(name), addr)
				}
			}
		}
	}
	var cs *raftpb.ConfState
	_ = n.call(context.Background(), func() { cs = n.rn.ApplyConfChange(cc) })
	n.applyMu.Lock()
	if cs != nil {
		n.setConf(cs)
	}
	n.fsm.skipEntry(idx)
	n.applyMu.Unlock()
	n.waitMu.Lock()
	ch := n.ccWait[req]
	delete(n.ccWait, req)
	n.waitMu.Unlock()
	if ch != nil && !d.bad {
		ch <- nil
	}
}

// setConf records a new configuration: suffrage in the book, streams to
// removed members stopped.
func (n *Node) setConf(cs *raftpb.ConfState) {
	n.bookMu.Lock()
	defer n.bookMu.Unlock()
	n.confState = cs
	// A voter of either half of a joint configuration is a voter (a
	// learner-to-be among them too, until the transition ends).
	in := make(map[uint64]string)
	for _, id := range slices.Concat(cs.GetLearners(), cs.GetLearnersNext()) {
		in[id] = "nonvoter"
	}
	for _, id := range slices.Concat(cs.GetVoters(), cs.GetVotersOutgoing()) {
		in[id] = "voter"
	}
	for id, m := range n.book {
		s, ok := in[id]
		if !ok {
			delete(n.book, id)
			if id != n.id {
				n.tr.removePeer(id)
			}
			continue
		}
		m.Suffrage = s
		n.book[id] = m
	}
}

// firstReqID returns the Origin and ReqID of an entry's first command.
func firstReqID(data []byte) (uint64, uint64) {
	if data[0] == batchVersion {
		d := decoder{b: data[1:]}
		if d.uvarint() == 0 {
			return 0, 0
		}
		if data = d.bytes(); d.bad {
			return 0, 0
		}
	}
	var c Command
	if DecodeCommand(data, &c) != nil {
		return 0, 0
	}
	return c.Origin, c.ReqID
}
