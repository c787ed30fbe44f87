// Package installtest holds only a test: that a user who gets latchd by
// version, as the README's `go install github.com/latchd/latchd/cmd/...@latest`
// does, can build its commands. Go refuses such an install when the
// module's go.mod has a replace directive, and a module proxy serves only
// what the module's zip holds, so the test builds that zip from the tracked
// files and installs from it.
package installtest
