package soak

import (
	"os"
	"time"
)

// Config sizes a soak run. Build it with Short, Long or FromEnv.
type Config struct {
	// Name is "short" or "long", for reports.
	Name string

	// Random load (Load).
	Clients  int           // concurrent client connections
	Duration time.Duration // how long they run
	HotLocks int           // lock keys every client fights over
	HotSems  int           // semaphore keys every client fights over
	SemLimit int           // the hot semaphores' limit
	ColdKeys int           // lock keys spread thin
	MaxHold  time.Duration // a holder keeps its slot up to this long
	// Slack is how late past its timeout a blocking request may be
	// answered (the issue asks for 100 ms).
	Slack time.Duration
	// StaleSlack bounds how far the server's idea of "now" may lag behind
	// a request it handles (it reads the clock once per batch and once per
	// expiry tick). Only checks that depend on a lease start the client
	// cannot observe exactly use it.
	StaleSlack time.Duration
	// LostAfter is how long past its timeout an answer may be missing
	// before the request counts as never answered.
	LostAfter time.Duration

	// Bad input (Flood).
	ReadTimeout    time.Duration // the server's read timeout in this test
	Bystanders     int           // well-behaved clients measured meanwhile
	RandomConns    int           // connections sending random bytes
	LongLineConns  int           // connections sending over-long lines
	SlowlorisConns int           // connections trickling a partial request
	HalfCloseConns int           // connections that shut down their write side
	OverflowConns  int           // connections pipelining past MaxParked behind a wait
	FloodParallel  int           // connections of one kind open at once (slowloris: all)
	P99Bound       time.Duration // bystanders' p99 latency during the flood

	// Memory.
	Keys          int // keys created, held, released and collected
	ChurnConns    int // connections opened and closed
	ChurnWave     int // of those, open at once
	HeapTolerance uint64
}

// Short is the run inside `go test -race ./soak/`: about 20-30 s on a
// 2-core machine.
func Short() Config {
	c := Config{
		Name:     "short",
		Clients:  100,
		Duration: 5 * time.Second,
		HotLocks: 4,
		HotSems:  2,
		SemLimit: 3,
		ColdKeys: 2000,
		MaxHold:  20 * time.Millisecond,
		// The race detector slows everything 5-10x and the machine has
		// 2 shared cores: a timeout answer 250 ms late there is the
		// scheduler, not the server. Without -race the 100 ms
		// holds with room to spare, so use 250 ms there too.
		Slack:      250 * time.Millisecond,
		StaleSlack: time.Second,
		LostAfter:  10 * time.Second,

		ReadTimeout:    300 * time.Millisecond,
		Bystanders:     8,
		RandomConns:    100,
		LongLineConns:  100,
		SlowlorisConns: 300,
		HalfCloseConns: 100,
		OverflowConns:  20,
		FloodParallel:  50,
		P99Bound:       100 * time.Millisecond,

		Keys:       10_000,
		ChurnConns: 2_000,
		ChurnWave:  500,
		// The tolerance is for measurement noise (the churn test moves
		// the heap by about 0.1 MiB), not for memory kept per key: 1 MiB
		// at 10,000 keys is 100 bytes a key; the long run's 2 MiB at
		// 100,000 keys is 20.
		HeapTolerance: 1 << 20,
	}
	if RaceEnabled {
		c.Slack = time.Second
		c.P99Bound = 250 * time.Millisecond
	}
	return c
}

// Long is `make soak`. Connection counts fit `ulimit -n` 20000 with client
// and server in one process (two descriptors per connection): at most
// SlowlorisConns + 4*FloodParallel + Bystanders, about 12,000 descriptors,
// are open at once in the flood, and ChurnWave*2 = 4,000 in the churn.
func Long() Config {
	c := Short()
	c.Name = "long"
	c.Clients = 500
	c.Duration = 60 * time.Second
	c.HotLocks = 8
	c.HotSems = 4
	c.ColdKeys = 20_000
	c.Slack = 100 * time.Millisecond

	c.ReadTimeout = 2 * time.Second
	c.Bystanders = 16
	c.RandomConns = 2_000
	c.LongLineConns = 2_000
	c.SlowlorisConns = 5_000
	c.HalfCloseConns = 2_000
	c.OverflowConns = 200
	c.FloodParallel = 200
	c.P99Bound = 100 * time.Millisecond

	c.Keys = 100_000
	c.HeapTolerance = 2 << 20
	c.ChurnConns = 20_000
	c.ChurnWave = 2_000
	if RaceEnabled {
		c.Slack = time.Second
		c.P99Bound = 250 * time.Millisecond
	}
	return c
}

// FromEnv returns Long when built with -tags soak or when LATCHD_SOAK=long,
// else Short. LATCHD_SOAK_DURATION (a Go duration) overrides how long the
// random load runs.
func FromEnv() Config {
	c := Short()
	if longByTag || os.Getenv("LATCHD_SOAK") == "long" {
		c = Long()
	}
	if d, err := time.ParseDuration(os.Getenv("LATCHD_SOAK_DURATION")); err == nil && d > 0 {
		c.Duration = d
	}
	return c
}
