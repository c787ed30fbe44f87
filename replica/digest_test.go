package replica

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latchd/engine"
)

// TestStateDigest: the digest is the SHA-256 of the state a snapshot
// holds, and the nodes of a cluster report the same digest once they
// have applied the same index; a different state gives another digest.
func TestStateDigest(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(t)
	ctx := ctxT(t, 10*time.Second)
	_, d0 := l.StateDigest()
	for i := range 5 {
		if _, err := l.Acquire(ctx, engine.AcquireReq{Key: []byte(fmt.Sprint("k", i)), Owner: 7, Limit: 1, TTL: time.Minute}, nil); err != nil {
			t.Fatal(err)
		}
	}
	state := waitSame(t, c.nodes...)
	var buf bytes.Buffer
	idx, err := l.WriteState(&buf)
	if err != nil {
		t.Fatal(err)
	}
	li, ld := l.StateDigest()
	if li != idx || ld != sha256.Sum256(buf.Bytes()) || !bytes.Equal(buf.Bytes(), state) {
		t.Fatalf("leader digest %x at %d; want the SHA-256 of its state at %d", ld, li, idx)
	}
	if ld == d0 {
		t.Fatal("the digest did not change with the state")
	}
	for _, n := range c.nodes {
		if i, d := n.StateDigest(); i != li || d != ld {
			t.Errorf("%s: digest %x at %d; the leader's is %x at %d", n.ID(), d, i, ld, li)
		}
	}
}
