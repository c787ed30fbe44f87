package replica

import (
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"
)

// Commit notices ride with the next append. Once a quorum has an entry,
// raft tells each follower the new commit index in a MsgApp with no
// entries; each follower reads it, steps it, writes its hard state and
// answers it. While the leader holds its queue for the clients it just
// answered (the batch wait), their next entry is a moment away and
// carries the same commit index (every MsgApp does), so the notice waits
// for it instead, and goes out as it is only if no append to that peer
// has replaced it by the time the wait ends. The notice is made before
// the entry is applied, and the wait starts in the apply: so a notice
// also waits while an apply is queued or under way, and the apply sends
// it if no wait began. A follower then learns of a commit with the next
// entry, a heartbeat, or the end of the wait.

// notices holds the commit notices waiting for the next append, by peer.
type notices struct {
	holding  atomic.Bool   // a batch wait is on (mirrors hold.on, read without mu)
	applying atomic.Int32  // applies queued or under way (MsgStorageApply)
	count    atomic.Int32  // notices held
	kept     atomic.Uint64 // notices ever held (tests)
	mu       sync.Mutex
	byPeer   map[uint64]*raftpb.Message
}

// commitNotice reports whether m is a MsgApp that carries no entries.
func commitNotice(m *raftpb.Message) bool {
	return m.GetType() == raftpb.MessageType_MsgApp && len(m.GetEntries()) == 0
}

// waiting reports whether a batch wait is on or may begin (an apply is
// queued or under way).
func (ns *notices) waiting() bool { return ns.holding.Load() || ns.applying.Load() > 0 }

// keep holds m, a commit notice, in place of an older one to the same
// peer, and reports whether it did: not when no batch wait is on or
// coming.
func (ns *notices) keep(m *raftpb.Message) bool {
	if !ns.waiting() {
		return false
	}
	ns.mu.Lock()
	if ns.byPeer == nil {
		ns.byPeer = make(map[uint64]*raftpb.Message)
	}
	if _, had := ns.byPeer[m.GetTo()]; !had {
		ns.count.Add(1)
	}
	ns.byPeer[m.GetTo()] = m
	ns.mu.Unlock()
	ns.kept.Add(1)
	return true
}

// replaced drops the notice held for m's peer when m, an append with
// entries, carries the commit index in its place.
func (ns *notices) replaced(m *raftpb.Message) {
	if ns.count.Load() == 0 || len(m.GetEntries()) == 0 {
		return
	}
	ns.mu.Lock()
	if _, had := ns.byPeer[m.GetTo()]; had {
		delete(ns.byPeer, m.GetTo())
		ns.count.Add(-1)
	}
	ns.mu.Unlock()
}

// due returns the notices held, and forgets them, once no batch wait is
// on or coming.
func (ns *notices) due() []*raftpb.Message {
	if ns.count.Load() == 0 || ns.waiting() {
		return nil
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	var ms []*raftpb.Message
	for id, m := range ns.byPeer {
		ms = append(ms, m)
		delete(ns.byPeer, id)
	}
	ns.count.Store(0)
	return ms
}
