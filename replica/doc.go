// Package replica makes latchd's engine the replicated state machine of an
// etcd raft group (go.etcd.io/raft/v3).
//
// Every mutating engine call (acquire, enqueue, wait, release, renew,
// disconnect, expiry, sessions) becomes a Command in the raft log, stamped
// by the leader with its clock and, for grants, a salt from its CSPRNG.
// Every node's FSM applies the same Commands in the same order to an engine
// built with the same Config, so every node holds the same locks, queues,
// leases and fence counter. A snapshot is the members and the engine's state.
//
// A Node drives a raft.RawNode with asynchronous storage writes (Node
// lists its goroutines); proposals that wait together share one entry
// (propose.go, batchwait.go). Only the leader takes commands (others
// answer a *NotLeaderError naming the leader) and only the leader runs
// expiry, by proposing Expire commands when a deadline is due. A new
// leader first proposes a Restamp, which restarts every lease clock from
// its own clock with no less time left than at the last applied command.
//
// A Sink for a parked request lives only on the node that proposed it: the
// FSM there routes the engine's delivery to it by the request's ID; other
// nodes apply the entry with no Sink.
//
// A Node also offers membership changes and leadership transfer (leader
// only, membership.go); a leader promotes caught-up learners by itself
// (promote.go). It offers a Status for observation. Peers talk over one
// TCP stream each way (transport.go); with Config.AuthToken every
// connection first passes a challenge-response handshake (auth.go).
//
// The data directory, its files, the records and snapshots, and the
// transport's handshake carry format versions; what a newer release wrote
// is refused with ErrNewerFormat (format.go, transportver.go).
//
// The package never reads flags or the environment and logs only through
// the *zap.Logger it is given. docs/cluster.md is the operator's guide;
// docs/design/replication.md and docs/design/storage.md say why it works
// as it does.
package replica
