package client

import "github.com/latchd/latchd/stats"

// The stats command's report. The types are defined once, in package
// stats, which the server's engine fills in too; these names keep the
// client's API self-contained.
type (
	// Stats is the server's state as the stats command reports it. The
	// server may add fields; unknown ones are ignored.
	Stats = stats.Report
	// LockStat describes a held lock.
	LockStat = stats.Lock
	// SemaphoreStat describes a semaphore in use.
	SemaphoreStat = stats.Semaphore
	// IdleStat describes a key nobody holds or waits for, kept until pruned.
	IdleStat = stats.Idle
)
