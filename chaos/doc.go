// Package chaos holds the bounded chaos run (make chaos): a three-node
// latchd cluster of real processes on loopback, killed and restarted under
// load, with the history checked for linearizability. It is built only
// with the chaos tag.
package chaos
