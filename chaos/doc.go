// Package chaos holds tests of three-node latchd clusters of real
// processes on loopback, with each history checked for linearizability:
// the bounded chaos run (make chaos, built only with the chaos tag), nodes
// killed and restarted under load; and the rolling upgrade (make upgrade,
// and a short run in make test), a cluster of the previous release
// replaced node by node with this one under load.
package chaos
