// Package replica makes latchd's engine the replicated state machine of a
// hashicorp/raft group.
//
// Every mutating engine call (acquire, enqueue, wait, release, renew,
// disconnect, expiry, sessions) becomes a Command in the raft log, stamped
// by the leader with its clock and, for grants, a salt from its CSPRNG.
// Every node's FSM applies the same Commands in the same order to an engine
// built with the same Config, so every node holds the same locks, queues,
// leases and fence counter. Snapshots are the engine's WriteState.
//
// A Node wraps raft and the FSM. Only the leader takes commands (others
// answer a *NotLeaderError naming the leader) and only the leader runs
// expiry, by proposing Expire commands when a deadline is due. A new leader
// first proposes a Restamp, which restarts every lease clock from its own
// clock with no less time left than at the last applied command.
//
// A Sink for a parked request lives only on the node that proposed it: the
// FSM there routes the engine's delivery to it by the request's ID; other
// nodes apply the entry with no Sink.
//
// A Node also offers membership changes and leadership transfer (leader
// only) and a Status for observation. With Config.AuthToken, DiskStorage's
// raft transport admits only peers that prove they share the token.
//
// The package never reads flags or the environment and logs only through
// the *zap.Logger it is given. See docs/cluster.md.
package replica
