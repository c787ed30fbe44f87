package engine

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// TestCaptureStateNowIsOneMoment: a holder that moves between two keys
// of two shards, taking the next before it releases the last, holds at
// least one of them at every moment; every capture taken meanwhile by
// CaptureStateNow shows it holding one, so no capture mixes one shard
// before a change with another after it.
func TestCaptureStateNowIsOneMoment(t *testing.T) {
	e := newTestEngine(t, nil)
	keys := [2][]byte{[]byte("a")}
	for i := 0; e.shardFor(keys[0]) == e.shardFor(keys[1]) || keys[1] == nil; i++ {
		keys[1] = []byte{'b', byte('a' + i%26), byte('a' + i/26)}
	}
	req := func(k int) AcquireReq {
		return AcquireReq{Key: keys[k], Owner: 1, Limit: 1, TTL: time.Hour, Salt: 9}
	}
	out, err := e.Acquire(1, req(0), nil)
	if err != nil || out.Result != Granted {
		t.Fatalf("first grant: %v, %v", out.Result, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		held, tok := 0, out.Token
		for i := int64(2); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			next, err := e.Acquire(i, req(1-held), nil)
			if err != nil || next.Result != Granted {
				t.Errorf("move to %s: %v, %v", keys[1-held], next.Result, err)
				return
			}
			if err := e.Release(i, keys[held], tok); err != nil {
				t.Errorf("release %s: %v", keys[held], err)
				return
			}
			held, tok = 1-held, next.Token
		}
	})
	for range 200 {
		state := e.CaptureStateNow().Finish(nil)
		r := newTestEngine(t, nil)
		if err := r.ReadState(bytes.NewReader(state)); err != nil {
			t.Fatalf("capture does not read back: %v", err)
		}
		if _, g := r.Metrics(); g.Held < 1 || g.Held > 2 {
			t.Fatalf("capture holds %d leases; the mover held 1 or 2 at every moment", g.Held)
		}
	}
	close(stop)
	wg.Wait()
}
