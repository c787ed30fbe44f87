package main

import (
	"testing"

	"github.com/latchd/latchd/client"
	"github.com/latchd/latchd/stats"
)

// A lock held back by a lock-delay shows in the stats table.
func TestStatsShowsLockDelay(t *testing.T) {
	st := &client.Stats{Delayed: []stats.Delayed{{Key: "k", Limit: 1, EndsInS: 4.2, Waiters: 2}}}
	rs := rows(st, false)
	if len(rs) != 1 || rs[0].key != "k" || rs[0].waiters != 2 || rs[0].leaseLeft != "delay 4.2s" {
		t.Fatalf("rows %+v", rs)
	}
}
