//go:build race

package soak

// RaceEnabled reports whether the race detector is on; the short run
// widens its timing bounds under it.
const RaceEnabled = true
