package server

import (
	"bytes"
	"net"
	"testing"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/metrics"
)

// fakePeer stands in for a gnet.Conn: process needs only Wake and Close.
type fakePeer struct{}

func (fakePeer) Wake(gnet.AsyncCallback) error { return nil }
func (fakePeer) Close() error                  { return nil }

// rig runs process directly, without a listener: a server (not started),
// two sessions, and buffers reused across rounds.
type rig struct {
	s         *Server
	a, b      *session
	lockBatch []byte
	relBatch  []byte
	tokens    [4][64]byte
	tokenLens [4]int
}

var (
	tryLockK0  = []byte("l\nk0\n0\n")
	waitLockK0 = []byte("l\nk0\n30\n")
)

var rigKeys = [4]string{"k0", "k1", "k2", "k3"}

func newRig(tb testing.TB, m *metrics.TCP) *rig {
	tb.Helper()
	eng, err := engine.New(engine.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	var opts []Option
	if m != nil {
		opts = append(opts, WithMetrics(m))
	}
	s, err := New(DefaultConfig(), backend.NewLocal(eng), zap.NewNop(), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	r := &rig{s: s, relBatch: make([]byte, 0, 512)}
	var ok bool
	if r.a, ok = s.open(remote, fakePeer{}); !ok {
		tb.Fatal("open refused")
	}
	if r.b, ok = s.open(remote, fakePeer{}); !ok {
		tb.Fatal("open refused")
	}
	for _, k := range rigKeys {
		r.lockBatch = codec.AppendRequest(r.lockBatch, codec.CmdLock, []byte(k), []byte("0 30"))
	}
	return r
}

// field returns the i-th space-separated field of line.
func field(line []byte, i int) []byte {
	for ; i > 0; i-- {
		j := bytes.IndexByte(line, ' ')
		if j < 0 {
			return nil
		}
		line = line[j+1:]
	}
	if j := bytes.IndexByte(line, ' '); j >= 0 {
		return line[:j]
	}
	return line
}

// run processes buf on ss and returns the output, failing on a close or
// on unconsumed bytes.
func (r *rig) run(tb testing.TB, ss *session, buf []byte) []byte {
	used, out, closeNow := r.s.process(ss, buf)
	if closeNow || used != len(buf) {
		tb.Fatalf("process(%q) = %d, %q, close %v", buf, used, out, closeNow)
	}
	ss.out = out[:0]
	return out
}

// pipelined sends four try-locks in one batch, then their four releases
// in another: eight requests in two turns.
func (r *rig) pipelined(tb testing.TB) {
	out := r.run(tb, r.a, r.lockBatch)
	for i := range rigKeys {
		j := bytes.IndexByte(out, '\n')
		if j < 0 || !bytes.HasPrefix(out, []byte("ok ")) {
			tb.Fatalf("lock %d: %q", i, out)
		}
		r.tokenLens[i] = copy(r.tokens[i][:], field(out[:j], 1))
		out = out[j+1:]
	}
	r.relBatch = r.relBatch[:0]
	for i, k := range rigKeys {
		r.relBatch = append(r.relBatch, "r\n"...)
		r.relBatch = append(r.relBatch, k...)
		r.relBatch = append(r.relBatch, '\n')
		r.relBatch = append(r.relBatch, r.tokens[i][:r.tokenLens[i]]...)
		r.relBatch = append(r.relBatch, '\n')
	}
	if out := r.run(tb, r.a, r.relBatch); string(out) != "ok\nok\nok\nok\n" {
		tb.Fatalf("releases: %q", out)
	}
}

// parked has b wait for a lock a holds; a's release grants it, and b's
// next turn takes the grant (where its latency is recorded).
func (r *rig) parked(tb testing.TB) {
	out := r.run(tb, r.a, tryLockK0)
	n := copy(r.relBatch[:cap(r.relBatch)], "r\nk0\n")
	n += copy(r.relBatch[n:cap(r.relBatch)], field(out[:len(out)-1], 1))
	n += copy(r.relBatch[n:cap(r.relBatch)], "\n")
	if out := r.run(tb, r.b, waitLockK0); len(out) != 0 || !r.b.parked {
		tb.Fatalf("waiter not parked: %q", out)
	}
	if out := r.run(tb, r.a, r.relBatch[:n]); string(out) != "ok\n" {
		tb.Fatalf("release: %q", out)
	}
	out = r.run(tb, r.b, nil)
	if r.b.parked || !bytes.HasPrefix(out, []byte("ok ")) {
		tb.Fatalf("waiter's grant: %q, parked %v", out, r.b.parked)
	}
	n = copy(r.relBatch[:cap(r.relBatch)], "r\nk0\n")
	n += copy(r.relBatch[n:cap(r.relBatch)], field(out[:len(out)-1], 1))
	n += copy(r.relBatch[n:cap(r.relBatch)], "\n")
	if out := r.run(tb, r.b, r.relBatch[:n]); string(out) != "ok\n" {
		tb.Fatalf("waiter's release: %q", out)
	}
}

// BenchmarkProcess measures process on a pipelined batch of four
// try-locks and a batch of their four releases (eight requests per op),
// and a parked hand-off, with and without metrics.
func BenchmarkProcess(b *testing.B) {
	for _, withMetrics := range []bool{false, true} {
		name := "plain"
		var m *metrics.TCP
		if withMetrics {
			name, m = "metrics", metrics.NewRegistry(nil).TCP()
		}
		b.Run("pipelined8/"+name, func(b *testing.B) {
			r := newRig(b, m)
			b.ReportAllocs()
			for b.Loop() {
				r.pipelined(b)
			}
		})
		b.Run("parked/"+name, func(b *testing.B) {
			r := newRig(b, m)
			b.ReportAllocs()
			for b.Loop() {
				r.parked(b)
			}
		})
	}
}
