package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// ErrUnknownServer means a membership operation named a server that is not
// a voter of the current configuration.
var ErrUnknownServer = errors.New("replica: no such voter")

// AddVoter adds the node id, reached at raftAddr, as a voter (an existing
// member's address is updated); it returns once the change is applied here.
func (n *Node) AddVoter(ctx context.Context, id, raftAddr string) error {
	if id == "" || raftAddr == "" {
		return fmt.Errorf("replica: add voter: empty ID or address")
	}
	return n.confChange(ctx, raftpb.ConfChangeType_ConfChangeAddNode, id, raftAddr)
}

// AddLearner adds the node id as a non-voting member: it receives the log
// and can be promoted with AddVoter once caught up, without counting
// toward the quorum meanwhile. A voter stays a voter: a retried add (a
// joining node's, after it was promoted) is not a demotion.
func (n *Node) AddLearner(ctx context.Context, id, raftAddr string) error {
	if id == "" || raftAddr == "" {
		return fmt.Errorf("replica: add learner: empty ID or address")
	}
	n.bookMu.Lock()
	m, ok := n.book[raftID(id)]
	n.bookMu.Unlock()
	if ok && m.Suffrage == "voter" {
		if !n.isLeaderState() {
			return n.notLeader()
		}
		return nil
	}
	return n.confChange(ctx, raftpb.ConfChangeType_ConfChangeAddLearnerNode, id, raftAddr)
}

// RemoveServer removes the node id; removing a non-member is not an error.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("replica: remove server: empty ID")
	}
	n.bookMu.Lock()
	_, ok := n.book[raftID(id)]
	n.bookMu.Unlock()
	if !ok {
		if !n.isLeaderState() {
			return n.notLeader()
		}
		return nil
	}
	return n.confChange(ctx, raftpb.ConfChangeType_ConfChangeRemoveNode, id, "")
}

func (n *Node) confChange(ctx context.Context, typ raftpb.ConfChangeType, id, addr string) error {
	return n.confChangeV2(ctx, typ, id, addr, raftpb.ConfChangeTransition_ConfChangeTransitionAuto)
}

// confChangeV2 proposes one change of member id with the given transition
// and waits until this node applies it (with a joint transition: the
// entry that enters the joint configuration).
func (n *Node) confChangeV2(ctx context.Context, typ raftpb.ConfChangeType, id, addr string, tr raftpb.ConfChangeTransition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !n.isLeaderState() {
		return n.notLeader()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.ApplyTimeout)
		defer cancel()
	}
	req := n.seq.Add(1)
	cctx := appendString(appendString(binary.AppendUvarint(nil, req), id), addr)
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(raftID(id))}}, Context: cctx}
	if tr != raftpb.ConfChangeTransition_ConfChangeTransitionAuto {
		cc.Transition = tr.Enum()
	}
	ch := make(chan error, 1)
	n.waitMu.Lock()
	n.ccWait[req] = ch
	n.waitMu.Unlock()
	defer func() {
		n.waitMu.Lock()
		delete(n.ccWait, req)
		n.waitMu.Unlock()
	}()
	var perr error
	if err := n.call(ctx, func() { perr = n.rn.ProposeConfChange(cc) }); err != nil {
		return err
	}
	if perr != nil {
		return n.notLeader()
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stop:
		return ErrClosed
	}
}

// TransferLeadership hands leadership to voter id, or with "" to the most
// up-to-date other voter, and returns once this node has stepped down.
func (n *Node) TransferLeadership(ctx context.Context, id string) error {
	// raft drops a transfer whose transferee does not campaign within an
	// election timeout (one still applying a configuration change, or slow
	// to catch up): try again while ctx allows.
	var err error
	for attempt := 0; attempt < transferAttempts; attempt++ {
		if err = n.transferOnce(ctx, id); !errors.Is(err, errTransferAborted) {
			return err
		}
	}
	return err
}

// transferAttempts bounds TransferLeadership's tries.
const transferAttempts = 3

// errTransferAborted: raft gave up on a transfer; this node still leads.
var errTransferAborted = errors.New("replica: transfer leadership: the transferee did not take over in an election timeout")

// transferOnce asks raft for one leadership transfer and waits for its
// verdict.
func (n *Node) transferOnce(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !n.isLeaderState() {
		return n.notLeader()
	}
	if id == n.cfg.NodeID {
		return fmt.Errorf("%w: %s is this node, the leader", ErrUnknownServer, id)
	}
	var target uint64
	if err := n.call(ctx, func() {
		st := n.rn.Status()
		best := uint64(0)
		for pid, pr := range st.Progress {
			if pid == n.id || pr.IsLearner {
				continue
			}
			if id != "" {
				if pid == raftID(id) {
					target = pid
				}
				continue
			}
			if target == 0 || pr.Match > best {
				target, best = pid, pr.Match
			}
		}
		if target != 0 {
			n.rn.TransferLeader(target)
		}
	}); err != nil {
		return err
	}
	if target == 0 {
		return fmt.Errorf("%w: %s", ErrUnknownServer, id)
	}
	// raft gives up on a transfer after an election timeout; this node
	// then stays leader.
	for {
		var bs raft.BasicStatus
		if err := n.call(ctx, func() { bs = n.rn.BasicStatus() }); err != nil {
			return err
		}
		if bs.RaftState != raft.StateLeader {
			return nil
		}
		if bs.LeadTransferee == 0 {
			return errTransferAborted
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stop:
			return ErrClosed
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// HandOff transfers leadership to another voter before this node stops.
func (n *Node) HandOff(timeout time.Duration) {
	if !n.isLeaderState() {
		return
	}
	other := false
	n.bookMu.Lock()
	for id, m := range n.book {
		other = other || (id != n.id && m.Suffrage == "voter")
	}
	n.bookMu.Unlock()
	if !other {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	if err := n.TransferLeadership(ctx, ""); err != nil {
		n.log.Warn("leadership not handed off before stopping", zap.String("node_id", n.cfg.NodeID), zap.Error(err))
		return
	}
	n.log.Info("leadership handed off before stopping", zap.String("node_id", n.cfg.NodeID),
		zap.Duration("took", time.Since(start)))
}
