//go:build hashicorpraft

package replica

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/latchd/latchd/engine"
)

// Concurrent proposals share log entries, and each gets its own answer.
func TestBatcherGroupsProposals(t *testing.T) {
	c := newCluster(t, 3, nil)
	ld := c.leader(t)
	before := ld.FSM().AppliedIndex()
	const n = 400
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	outs := make([]engine.Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			outs[i], errs[i] = ld.Acquire(ctx, engine.AcquireReq{Key: []byte(fmt.Sprint("k", i%200)),
				Owner: engine.OwnerID(i + 1), Limit: 1, TTL: time.Minute}, nil)
		})
	}
	wg.Wait()
	granted, timedOut := 0, 0
	fences := map[uint64]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("proposal %d: %v", i, errs[i])
		}
		switch outs[i].Result {
		case engine.Granted:
			granted++
			if fences[outs[i].Token.Fence] {
				t.Fatalf("fence %d granted twice", outs[i].Token.Fence)
			}
			fences[outs[i].Token.Fence] = true
		case engine.TimedOut:
			timedOut++
		}
	}
	// 200 keys, two try-locks each: one wins, one times out.
	if granted != 200 || timedOut != 200 {
		t.Fatalf("granted %d, timed out %d; want 200 and 200", granted, timedOut)
	}
	entries := ld.FSM().AppliedIndex() - before
	t.Logf("%d proposals in %d log entries (expiry entries included)", n, entries)
	if entries >= n {
		t.Fatalf("%d proposals took %d entries: no batching", n, entries)
	}
	// Every node applied the same state.
	waitSame(t, c.live()...)
}

func TestApplyBatchRejectsCorruptEntries(t *testing.T) {
	f, err := NewFSM(testConfig("n0").Engine, 1)
	if err != nil {
		t.Fatal(err)
	}
	good := AppendCommand(nil, &Command{Op: OpAcquire, Now: 1, Owner: 1, Key: []byte("a"), Limit: 1, TTL: time.Second})
	mk := func(count uint64, parts ...[]byte) []byte {
		b := binary.AppendUvarint([]byte{batchVersion}, count)
		for _, p := range parts {
			b = binary.AppendUvarint(b, uint64(len(p)))
			b = append(b, p...)
		}
		return b
	}
	restamp := AppendCommand(nil, &Command{Op: OpRestamp, Now: 5, Key: []byte("x")})
	cases := map[string]struct {
		data []byte
		want []bool // per reply: ok
	}{
		"good":            {mk(1, good), []bool{true}},
		"garbage command": {mk(2, []byte{9, 9, 9}, good), []bool{false, true}},
		"restamp inside":  {mk(1, restamp), []bool{false}},
		"count too high":  {mk(2, good), []bool{true, false}},
	}
	idx := uint64(0)
	for name, tc := range cases {
		idx++
		r := f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: tc.data})
		replies, ok := r.(batchReply)
		if !ok || len(replies) != len(tc.want) {
			t.Fatalf("%s: reply %#v", name, r)
		}
		for i, w := range tc.want {
			if (replies[i].Err == nil) != w {
				t.Fatalf("%s: reply %d = %+v, want ok=%v", name, i, replies[i], w)
			}
		}
	}
	if r, ok := f.Apply(&raft.Log{Index: idx + 1, Type: raft.LogCommand,
		Data: binary.AppendUvarint([]byte{batchVersion}, maxBatch+1)}).(Reply); !ok || r.Err == nil {
		t.Fatalf("a batch with a huge count was accepted")
	}
}
