package engine

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// statsEngine holds 20 locks and 10 semaphores and keeps 200 idle locks,
// each key 100 bytes with characters JSON escapes.
func statsEngine(t *testing.T) *Engine {
	t.Helper()
	e := newTestEngine(t, func(c *Config) { c.MaxKeys = 0 })
	key := func(kind string, i int) []byte {
		return []byte(fmt.Sprintf("%s<%d>%s", kind, i, strings.Repeat("\"", 90)))
	}
	for i := range 20 {
		mustGrant(t, e, sec, AcquireReq{Key: key("lock", i), Owner: 1, Limit: 1, TTL: time.Hour})
	}
	for i := range 10 {
		mustGrant(t, e, sec, AcquireReq{Key: key("sem", i), Owner: 1, Limit: 3, TTL: time.Hour})
	}
	for i := range 200 {
		g := mustGrant(t, e, sec, AcquireReq{Key: key("idle", i), Owner: 1, Limit: 1})
		if err := e.Release(sec, key("idle", i), g.Token); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func TestSnapshotMaxBoundsTheCopy(t *testing.T) {
	e := statsEngine(t)
	full := e.SnapshotMax(2*sec, 0)
	if full.Truncated || full.Totals != nil || len(full.IdleLocks) != 200 {
		t.Fatalf("unbounded: truncated %v, totals %v, %d idle; want everything", full.Truncated, full.Totals, len(full.IdleLocks))
	}
	st := e.SnapshotMax(2*sec, 5000)
	n := len(st.Locks) + len(st.Semaphores) + len(st.IdleLocks) + len(st.IdleSemaphores)
	want := StatsTotals{Locks: 20, Semaphores: 10, IdleLocks: 200}
	if !st.Truncated || st.Totals == nil || *st.Totals != want || n == 0 || n > 5000/100 {
		t.Fatalf("bounded: truncated %v, totals %+v, %d entries; want truncated, totals %+v, 1 to 50 entries",
			st.Truncated, st.Totals, n, want)
	}
}

func TestEncodeStatsFitsTheCap(t *testing.T) {
	e := statsEngine(t)
	tests := []struct {
		name      string
		snapMax   int // SnapshotMax's bound; 0: none
		max       int
		wantTrunc bool
	}{
		{name: "no cap", max: 0},
		{name: "cap above the size", max: 1 << 20},
		{name: "escaping blows the estimate", snapMax: 8000, max: 8000, wantTrunc: true},
		{name: "whole snapshot, small cap", max: 4096, wantTrunc: true},
		{name: "totals only", snapMax: 1, max: 1, wantTrunc: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := EncodeStats(e.SnapshotMax(2*sec, tt.snapMax), tt.max, nil)
			if err != nil {
				t.Fatal(err)
			}
			var st Stats
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			if tt.max > 1 && len(body) > tt.max {
				t.Errorf("%d bytes; want at most %d", len(body), tt.max)
			}
			if st.Truncated != tt.wantTrunc {
				t.Errorf("truncated %v; want %v", st.Truncated, tt.wantTrunc)
			}
			want := StatsTotals{Locks: 20, Semaphores: 10, IdleLocks: 200}
			if tt.wantTrunc && (st.Totals == nil || *st.Totals != want) {
				t.Errorf("totals %+v; want %+v", st.Totals, want)
			}
			if !tt.wantTrunc && (st.Totals != nil || len(st.IdleLocks) != 200) {
				t.Errorf("totals %+v, %d idle locks; want no totals, all 200", st.Totals, len(st.IdleLocks))
			}
		})
	}
}
