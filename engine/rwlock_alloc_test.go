//go:build !race

package engine

import (
	"testing"
	"time"
)

// TestRWAllocs checks the read-write paths allocate nothing once warm.
func TestRWAllocs(t *testing.T) {
	e := newTestEngine(t, nil)
	key := []byte("rw")
	s1, s2, sw := &countSink{}, &countSink{}, &countSink{}
	tests := []struct {
		name string
		fn   func()
	}{
		{"read+read+release", func() {
			a, _ := e.Acquire(0, rw("rw", 1, ModeRead, 0), nil)
			b, _ := e.Acquire(0, rw("rw", 2, ModeRead, 0), nil)
			if b.Result != Granted {
				t.Fatal(b)
			}
			_ = e.Release(0, key, a.Token)
			_ = e.Release(0, key, b.Token)
		}},
		{"write+renew+release", func() {
			a, _ := e.Acquire(0, rw("rw", 1, ModeWrite, 0), nil)
			if _, err := e.Renew(0, key, a.Token, time.Minute); err != nil {
				t.Fatal(err)
			}
			_ = e.Release(0, key, a.Token)
		}},
		{"writer hands off to parked readers", func() {
			w, _ := e.Acquire(0, rw("rw", 1, ModeWrite, 0), nil)
			e.Acquire(0, rw("rw", 2, ModeRead, time.Minute), s1)
			e.Acquire(0, rw("rw", 3, ModeRead, time.Minute), s2)
			e.Acquire(0, rw("rw", 4, ModeWrite, time.Minute), sw)
			_ = e.Release(0, key, w.Token)
			_ = e.Release(0, key, s1.last.Token)
			_ = e.Release(0, key, s2.last.Token)
			_ = e.Release(0, key, sw.last.Token)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn()
			if n := testing.AllocsPerRun(200, tt.fn); n != 0 {
				t.Errorf("%v allocs per run; want 0", n)
			}
		})
	}
}
