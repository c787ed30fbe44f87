package replica

import (
	"io"
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

// TestSockReaderAllocs: a read of data already in the socket allocates
// nothing (the transport reads every raft message through it).
func TestSockReaderAllocs(t *testing.T) {
	a, b := tcpPair(t)
	if _, err := a.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	r := newSockReader(b)
	buf := make([]byte, 512)
	if _, err := io.ReadFull(r, buf); err != nil { // the data is there
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%.1f allocations per read", n)
	}
}
