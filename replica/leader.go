package replica

import (
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/fence"
)

// What only the leader does: a Restamp at the start of each leadership,
// and Expire entries when a deadline is due.

// run restamps on every new leadership and proposes expiry while leader.
func (n *Node) run() {
	tick := time.NewTicker(n.cfg.ExpireEvery)
	defer tick.Stop()
	var (
		stampTerm uint64
		unlike    string // the leader with other engine settings, as last reported
	)
	for {
		select {
		case <-n.stop:
			n.setReady(false)
			return
		case <-tick.C:
		}
		unlike = n.reportUnlike(unlike)
		lt := n.leadTerm.Load()
		if lt == 0 || n.appFailed.Load() {
			stampTerm = 0
			n.setReady(false)
			continue
		}
		if stampTerm != lt {
			n.setReady(false)
			c := Command{Op: OpRestamp, Key: []byte(n.cfg.NodeID), Addr: n.cfg.ClientAddr, HTTPAddr: n.cfg.HTTPAddr,
				Token: fence.Token{Fence: max(uint64(max(n.now(), 0)), n.cfg.FenceFloor), Salt: n.fsm.fingerprint}}
			if _, err := n.applyRaw(c); err != nil || n.leadTerm.Load() != lt {
				continue
			}
			stampTerm = lt
			n.setReady(true)
		}
		if n.fsm.Engine().NextDeadline() <= n.now() {
			_, _ = n.applyRaw(Command{Op: OpExpire})
		}
	}
}

// applyRaw proposes c as an entry of its own and waits for its Reply.
func (n *Node) applyRaw(c Command) (Reply, error) {
	n.stamp(&c)
	return n.wait(&proposal{c: c, raw: true, done: make(chan proposalResult, 1)})
}

// reportUnlike logs, once per change, that the leader's engine settings
// differ from this node's (enginecheck.go), and returns whom it reported.
func (n *Node) reportUnlike(was string) string {
	u := n.fsm.engineUnlike()
	if u != was && u != "" {
		n.log.Error("engine settings differ from the leader's: replicas diverge; give every node the same "+
			"--shards, --max-locks, --max-waiters, --max-keys-per-owner, --default-lease-ttl and --gc-max-idle",
			zap.String("leader", u))
	}
	return u
}
