// Package replica makes latchd's engine the replicated state machine of an
// etcd raft group (go.etcd.io/raft/v3).
//
// Every mutating engine call becomes a Command in the raft log, stamped by
// the leader with its clock and, for grants, a salt from its CSPRNG; every
// node's FSM applies the same Commands in the same order, so every node
// holds the same locks, queues, leases and fence counter. Only the leader
// takes commands (others answer a *NotLeaderError naming it) and runs
// expiry; a new leader first proposes a Restamp (fsm.go). A parked
// request's Sink lives only on the node that proposed it.
//
// A Node also changes membership, transfers leadership, promotes caught-up
// learners (promote.go) and reports a Status. Peers talk over one TCP
// stream each way (transport.go), optionally authenticated (auth.go). What
// a newer release wrote is refused with ErrNewerFormat (format.go).
//
// The package never reads flags or the environment and logs only through
// the *zap.Logger it is given. docs/cluster.md is the operator's guide;
// docs/design/replication.md and docs/design/storage.md say why it works
// as it does.
package replica
