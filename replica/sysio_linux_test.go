package replica

import (
	"runtime"
	"testing"
)

// TestCanHold: a sync may keep its processor only when there is another
// one and this process runs one node at most.
func TestCanHold(t *testing.T) {
	base := liveNodes.Load()
	t.Cleanup(func() { liveNodes.Store(base) })
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	for _, c := range []struct {
		nodes int32
		procs int
		want  bool
	}{{0, 2, true}, {1, 2, true}, {2, 2, false}, {3, 4, false}, {1, 1, false}} {
		liveNodes.Store(c.nodes)
		runtime.GOMAXPROCS(c.procs)
		if got := canHold(); got != c.want {
			t.Errorf("%d nodes, GOMAXPROCS %d: canHold %v, want %v", c.nodes, c.procs, got, c.want)
		}
	}
}

// TestSockReaderIsRaw: a TCP connection is read with raw read(2) calls.
// (Here, not in sysio_test.go: sockReader exists on Linux only.)
func TestSockReaderIsRaw(t *testing.T) {
	_, b := tcpPair(t)
	if r := newSockReader(b); func() bool { _, ok := r.(*sockReader); return !ok }() {
		t.Fatalf("a TCP connection read through %T", r)
	}
}
