// Package nemesis runs a three-node latchd cluster on real network
// namespaces and injects the faults real clusters meet while clients
// load it: an isolated leader, majority/minority partitions, one-way
// loss, a paused leader, kill -9 with restart and a full disk. It checks
// the recorded history for linearizability and checks what a fenced
// resource accepted.
//
// The run needs root (it creates namespaces, a bridge, veth pairs and
// tmpfs mounts, all named with a per-run prefix and removed on exit) and
// skips otherwise. Its tests are behind the nemesis build tag:
//
//	make nemesis                      # NEMESIS_DURATION=90s by default
//	NEMESIS_DURATION=60s make nemesis
//
// Every address it uses is in 198.18.0.0/24, inside namespaces it made,
// with no default route: no traffic leaves them.
package nemesis
