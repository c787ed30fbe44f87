// Package nemesis runs a three-node latchd cluster on real network
// namespaces and injects the faults real clusters meet while clients
// load it (faults_test.go lists them: partitions of every shape, a slow
// and lossy link, pauses, kill -9, slow and full disks, membership
// changes, run-under-lock, and combinations). It checks the recorded
// history for linearizability, what a fenced resource accepted, that
// every replica holds every acknowledged operation and that their state
// digests agree after heal, that a leader serves again, and that a
// command run under a lock is stopped before another can take it.
//
// The run needs root (it creates namespaces, a bridge, veth pairs, loop
// devices, cgroups and tmpfs mounts, all named with a per-run prefix and
// removed on exit) and skips otherwise. Its tests are behind the nemesis
// build tag:
//
//	make nemesis                      # NEMESIS_DURATION=12m by default
//	NEMESIS_DURATION=90s make nemesis # the first ten faults
//	make nemesis-slice                # 75 s, part of make test
//
// Every address it uses is in 198.18.0.0/24, inside namespaces it made,
// with no default route: no traffic leaves them.
package nemesis
