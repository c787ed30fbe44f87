// Package soak is latchd's reliability suite: it drives a real server over
// loopback TCP with the raw three-line protocol and checks what must
// survive random load, bad input and churn. Everything lives in this
// package's _test.go files, the tests and the driver library they share:
// a raw protocol connection (Conn), a random-load generator (Load) that
// records a History of client-observed grants and answers, checkers over
// that History, bad-input floods, heap and goroutine probes, and a
// Report that prints what was tried and what survived.
//
// Two sizes: a short run inside `go test -race ./soak/` (part of
// `make test`) and a long one, `make soak` (the build tag soak or
// LATCHD_SOAK=long, without -race; see Config), which opens up to about
// 6,000 connections at once. LATCHD_SOAK_DURATION sets its random load's
// length. Each test logs a report table; every row must show 0 violations.
//
// # Soundness
//
// Every check must hold on a correct server however the machine stalls, so
// each one uses only what the client saw, bounded the safe way round:
//
//   - Holders: a grant's interval runs from the moment the grant arrived to
//     the last instant the client can prove it still held the slot: when it
//     sent a release that answered ok, or, for a lease it let lapse or a
//     connection it dropped, the lower bound on the lease deadline that a
//     successful renew (sent at s with ttl d: the deadline is >= s+d)
//     proves. Such an interval lies inside the server's real holding
//     interval, so more than limit of them overlapping on one key is a bug.
//     A grant with no such proof is left out.
//   - Fences: a fence is issued before its grant arrives and after its
//     request is sent, so if grant A arrived before grant B's request left,
//     fence(A) < fence(B). The counter is server-wide, so this is checked
//     across all keys, which implies the per-key order.
//   - Answers: a blocking request with timeout T is answered exactly once,
//     no later than T plus a slack after it was sent, and a timeout answer
//     comes no earlier than T after it was sent.
//   - Leases: a renew or release that fails before a proven lease deadline
//     means the lease ended early.
package soak
