// Package testutil holds generic helpers for tests: polling a condition
// with a deadline (free loopback ports are internal/testport's). It
// imports nothing of the project above internal/, so every package's
// tests may use it; the helpers that start servers live beside them
// (server/servertest). Only _test.go files import it.
package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it holds or timeout
// passes, then fails the test with msg.
func Eventually(tb testing.TB, timeout time.Duration, cond func() bool, msg string) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %v: %s", timeout, msg)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
